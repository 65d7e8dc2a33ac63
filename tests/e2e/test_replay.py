"""Enforced replay and logprobs modes through Generate, on the real engine (inference-validation.md 1, 2, 4)."""

from __future__ import annotations

import asyncio
import json

import grpc
import jsonschema
import pytest

from engine_ext.consensus import sequence_distance
from gonka.mlnode.client import AsyncInferenceClient, Generation, InferenceClient, ServerError, build_request

PROMPT_IDS = [9707, 1879, 11, 419, 374, 264, 1273]
SCHEMA = json.dumps(
    {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "string", "maxLength": 6}},
        "required": ["a", "b"],
    }
)
CONFIGURATIONS = {
    "greedy": dict(temperature=0.0),
    "seeded-temperature": dict(temperature=0.99, seed=5),
    "top-p": dict(temperature=1.0, top_p=0.9, seed=6),
    "top-k": dict(temperature=1.0, top_k=20, seed=7),
    "json-schema": dict(temperature=0.7, seed=8, json_schema=SCHEMA),
}


def chain_positions(generation: Generation) -> list[tuple[int, dict[int, float]]]:
    output = generation.first
    return list(zip(output.token_ids, output.logprobs.chain_top))


@pytest.mark.parametrize("mode", ["raw", "processed"])
@pytest.mark.parametrize("configuration", list(CONFIGURATIONS), ids=list(CONFIGURATIONS))
def test_replaying_the_servers_own_output_gives_the_same_tokens_and_distance_below_0_001(
    client: InferenceClient, configuration: str, mode: str
) -> None:
    request = dict(
        token_ids=PROMPT_IDS,
        max_tokens=24,
        top_logprobs=5,
        logprobs_mode=mode,
        chain_top_logprobs=True,
        **CONFIGURATIONS[configuration],
    )
    original = client.generate(**request)
    replay = client.generate(**request, enforced_token_ids=original.first.token_ids)
    assert replay.first.token_ids == original.first.token_ids
    assert len(original.first.logprobs.chain_top) == len(original.first.token_ids)
    assert all(len(top) == 5 for top in original.first.logprobs.chain_top)
    assert 0 <= sequence_distance(chain_positions(original), chain_positions(replay)) < 0.001


@pytest.mark.parametrize("include_text", [False, True], ids=["token-stream", "vllm-generate"])
def test_enforced_tokens_replace_what_sampling_would_have_chosen(client: InferenceClient, include_text: bool) -> None:
    common = dict(
        token_ids=PROMPT_IDS,
        max_tokens=16,
        temperature=1.0,
        top_logprobs=3,
        logprobs_mode="raw",
        include_text=include_text,
    )
    original = client.generate(**common, seed=1).first
    other_seed = client.generate(**common, seed=2).first
    assert other_seed.token_ids != original.token_ids  # the seed alone would give other tokens
    replay = client.generate(**common, seed=2, enforced_token_ids=original.token_ids).first
    assert replay.token_ids == original.token_ids
    # Raw logprobs are the model's for the same context: the same, whatever the seed.
    assert replay.logprobs.logprobs == pytest.approx(original.logprobs.logprobs, abs=1e-5)
    assert replay.logprobs.top_ids == original.logprobs.top_ids
    if include_text:
        assert replay.text == original.text


def test_a_replay_stops_at_its_end_of_sequence_and_past_the_end_repeats_the_last_token(client: InferenceClient) -> None:
    stopped = client.generate(
        token_ids=PROMPT_IDS, max_tokens=20, temperature=0.0, enforced_token_ids=[100, 200, 300]
    ).first
    eos = client.model_info().eos_token_id
    assert stopped.token_ids == [100, 200, 300, eos] and stopped.finish_reason == "stop"
    ignoring = client.generate(
        token_ids=PROMPT_IDS, max_tokens=6, temperature=0.0, ignore_eos=True, enforced_token_ids=[100, 200]
    ).first
    assert ignoring.token_ids == [100, 200, eos, eos, eos, eos] and ignoring.finish_reason == "length"


def test_mixed_mode_batches_give_each_row_the_logprobs_of_its_own_mode(server) -> None:
    def request(index: int, mode: str) -> dict:
        return dict(
            token_ids=PROMPT_IDS + [index],
            max_tokens=12,
            temperature=0.8,
            top_k=20,
            seed=100 + index,
            top_logprobs=5,
            logprobs_mode=mode,
        )

    async def run(modes: list[str]) -> list[Generation]:
        async with AsyncInferenceClient(server.target) as aio:
            return await asyncio.gather(*(aio.generate(**request(index, mode)) for index, mode in enumerate(modes)))

    count = 32
    mixed_modes = ["raw" if index % 2 else "processed" for index in range(count)]
    mixed = asyncio.run(run(mixed_modes))
    all_raw, all_processed = asyncio.run(run(["raw"] * count)), asyncio.run(run(["processed"] * count))
    differing = 0
    for index, mode in enumerate(mixed_modes):
        reference = (all_raw if mode == "raw" else all_processed)[index].first
        row = mixed[index].first
        assert row.token_ids == reference.token_ids, index
        assert row.logprobs.logprobs == pytest.approx(reference.logprobs.logprobs, abs=1e-5), index
        assert row.logprobs.top_ids == reference.logprobs.top_ids, index
        other = (all_processed if mode == "raw" else all_raw)[index].first
        differing += row.logprobs.logprobs != pytest.approx(other.logprobs.logprobs, abs=1e-3)
    assert differing == count  # the two modes really give different numbers here (temperature 0.8, top-k 20)


def test_processed_mode_pads_short_lists_with_the_lowest_ids(client: InferenceClient) -> None:
    # A grammar leaves only a few tokens: processed lists are padded with ids 0, 1, 2, ... at -9999.
    output = client.generate(
        prompt="Answer:", choice=["yes", "no"], top_logprobs=12, temperature=0.0, logprobs_mode="processed"
    ).first
    first_ids, first_values = output.logprobs.top_ids[0], output.logprobs.top_logprobs[0]
    padded = [token for token, value in zip(first_ids, first_values) if value == -9999.0]
    assert padded and padded == sorted(padded) and padded[0] in (0, 1)
    assert max(padded) < 12


def test_the_prompt_as_run_comes_back_for_an_exact_replay(client: InferenceClient, tokenizer) -> None:
    messages = [("system", "Be brief."), ("user", "Name a fruit.")]
    generation = client.generate(messages=messages, max_tokens=4, temperature=0.0, include_prompt_token_ids=True)
    expected = tokenizer.apply_chat_template(
        [{"role": r, "content": c} for r, c in messages], add_generation_prompt=True, tokenize=True, return_dict=False
    )
    assert generation.prompt_as_run == list(expected)
    again = client.generate(token_ids=generation.prompt_as_run, max_tokens=4, temperature=0.0)
    assert again.first.token_ids == generation.first.token_ids


@pytest.mark.parametrize(
    ("kwargs", "reason", "field"),
    [
        (dict(enforced_token_ids=[5, 151936 + 1]), "TOKEN_OUT_OF_VOCABULARY", "enforced_token_ids[1]"),
        (dict(enforced_token_ids=[5], n=2), "INVALID_FIELD", "sampling.n"),
        (dict(chain_top_logprobs=True), "INVALID_FIELD", "logprobs.chain_top_logprobs"),
    ],
    ids=["out-of-vocabulary", "n-above-one", "chain-without-top-logprobs"],
)
def test_bad_replay_input_is_invalid_argument(client: InferenceClient, kwargs: dict, reason: str, field: str) -> None:
    with pytest.raises(ServerError) as caught:
        client.generate(build_request(token_ids=PROMPT_IDS, max_tokens=4, **kwargs), timeout=60)
    assert (caught.value.code, caught.value.reason, caught.value.field) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        reason,
        field,
    )


def test_an_unknown_logprobs_mode_is_invalid_argument(client: InferenceClient) -> None:
    request = build_request(token_ids=PROMPT_IDS, max_tokens=4, top_logprobs=2)
    request.logprobs.mode = 7
    with pytest.raises(ServerError) as caught:
        client.generate(request, timeout=60)
    assert (caught.value.code, caught.value.field) == (grpc.StatusCode.INVALID_ARGUMENT, "logprobs.mode")


BOUNDED_SCHEMA = {
    "type": "object",
    "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 99}, "b": {"type": "string", "maxLength": 4}},
    "required": ["a", "b"],
    "additionalProperties": False,
}


def test_a_replay_that_breaks_its_grammar_completes_and_constrains_nobody_else(server, tokenizer) -> None:
    regex = "[0-9]{3}-[a-z]{2}"
    off_grammar = tokenizer.encode(" Slow rivers, quiet hills")  # rejected by the regex at once

    async def scenario() -> tuple[list[Generation], Generation]:
        async with AsyncInferenceClient(server.target) as aio:
            common = dict(
                token_ids=PROMPT_IDS,
                temperature=0.0,
                top_logprobs=3,
                logprobs_mode="raw",
                max_tokens=len(off_grammar) + 1,
            )
            jobs = [aio.generate(**common, regex=regex, enforced_token_ids=off_grammar)]
            for seed in range(4):  # constrained neighbours in the same batches
                jobs.append(
                    aio.generate(
                        prompt="Code:", regex=regex, temperature=1.0, seed=seed, include_text=True, max_tokens=20
                    )
                )
                jobs.append(
                    aio.generate(
                        prompt="Data:",
                        json_schema=json.dumps(BOUNDED_SCHEMA),
                        temperature=0.7,
                        seed=seed,
                        include_text=True,
                        max_tokens=60,
                    )
                )
            results = await asyncio.gather(*jobs)
            unconstrained = await aio.generate(**common, enforced_token_ids=off_grammar)
            return results, unconstrained

    results, unconstrained = asyncio.run(scenario())
    broken = results[0].first
    eos = tokenizer.eos_token_id
    assert broken.token_ids == off_grammar + [eos] and broken.finish_reason == "stop"
    # After the break the row's mask allows every token: its raw logprobs (taken after the mask)
    # are those of the same replay without any grammar, not -inf or another request's mask.
    assert broken.logprobs.logprobs[1:] == pytest.approx(unconstrained.first.logprobs.logprobs[1:], abs=1e-5)
    assert broken.logprobs.top_ids[1:] == unconstrained.first.logprobs.top_ids[1:]
    assert broken.logprobs.logprobs[0] == -9999.0  # the grammar still held at the first position
    for neighbour in results[1::2]:
        text = neighbour.first.text
        assert len(text) == 6 and text[:3].isdigit() and text[3] == "-" and text[4:].isalpha(), text
    for neighbour in results[2::2]:
        assert neighbour.first.finish_reason == "stop", neighbour.first
        jsonschema.validate(json.loads(neighbour.first.text), BOUNDED_SCHEMA)
    with InferenceClient(server.target) as after:
        assert after.generate(token_ids=PROMPT_IDS, max_tokens=3, temperature=0.0).first.finish_reason == "length"
