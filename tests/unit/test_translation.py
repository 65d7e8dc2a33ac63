"""GenerateRequest -> the engine's GenerationRequest, with the embedded model's real tokenizer."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest

from engine_ext.consensus.logprobs_mode import LogprobsMode
from engine_ext.model_facts import ModelFacts
from gonka.mlnode.client import build_request
from gonka.mlnode.v1 import inference_pb2 as pb
from server.core.errors import Reason, ServiceError
from server.translation import GenerationPlan, RequestTranslator
from server.translation.chat_template import client_template_variables
from server.translation.prompt import PromptLimits, PromptReader, integral_numbers_as_ints
from server.translation.tokenizer_pool import TokenizerPool

FACTS = ModelFacts(
    served_model_name="tiny",
    model_path="/m",
    max_model_len=64,
    vocab_size=151936,
    tokenizer_max_token_id=151668,
    eos_token_id=151645,
    bos_token_id=None,
    dtype="bfloat16",
    max_logprobs=20,
    tensor_parallel_size=1,
    has_chat_template=True,
)
MAX_CHARS = 400


@pytest.fixture(scope="module")
def pool(tokenizer) -> Iterator[TokenizerPool]:
    tokenizers = TokenizerPool(tokenizer)
    yield tokenizers
    tokenizers.close()


def make_translator(tokenizer, pool: TokenizerPool, facts: ModelFacts = FACTS) -> RequestTranslator:
    limits = PromptLimits(max_chars=MAX_CHARS, template_variables=client_template_variables(tokenizer))
    return RequestTranslator(facts, PromptReader(facts, limits, pool))


@pytest.fixture(scope="module")
def translator(tokenizer, pool: TokenizerPool) -> RequestTranslator:
    return make_translator(tokenizer, pool)


def plan(translator: RequestTranslator, request: pb.GenerateRequest) -> GenerationPlan:
    return asyncio.run(translator.plan(request, "r-1"))


def refusal(translator: RequestTranslator, request: pb.GenerateRequest) -> ServiceError:
    with pytest.raises(ServiceError) as caught:
        plan(translator, request)
    return caught.value


def test_unset_sampling_fields_are_left_to_the_engine_but_max_tokens(translator: RequestTranslator) -> None:
    request = plan(translator, build_request(token_ids=[1, 2, 3])).request
    # The contract's default for max_tokens is the rest of the context (vLLM's own would be 16).
    assert dict(request.sampling) == {"max_tokens": FACTS.max_model_len - 3}
    assert request.top_logprobs is None and request.prompt_logprobs is None
    assert (request.include_text, request.final_only, request.constraint, request.request_id) == (
        False,
        False,
        None,
        "r-1",
    )


def test_set_fields_are_passed_through(translator: RequestTranslator) -> None:
    request = build_request(
        token_ids=[1, 2, 3],
        temperature=0.8,
        top_p=0.5,
        top_k=7,
        min_p=0.25,
        presence_penalty=0.5,
        frequency_penalty=-0.5,
        repetition_penalty=1.5,
        seed=-3,
        max_tokens=9,
        min_tokens=2,
        stop=["x"],
        stop_token_ids=[5],
        ignore_eos=True,
        n=2,
        skip_special_tokens=False,
        top_logprobs=5,
        prompt_logprobs=1,
        final_only=True,
        include_text=True,
    )
    generation = plan(translator, request).request
    assert generation.sampling == {
        "temperature": pytest.approx(0.8),
        "top_p": 0.5,
        "top_k": 7,
        "min_p": 0.25,
        "presence_penalty": 0.5,
        "frequency_penalty": -0.5,
        "repetition_penalty": 1.5,
        "seed": -3,
        "max_tokens": 9,
        "min_tokens": 2,
        "n": 2,
        "ignore_eos": True,
        "skip_special_tokens": False,
    }
    assert (generation.stop, generation.stop_token_ids) == (("x",), (5,))
    assert (generation.top_logprobs, generation.prompt_logprobs, generation.final_only, generation.include_text) == (
        5,
        1,
        True,
        True,
    )


def test_prompt_logprobs_can_be_asked_for_alone(translator: RequestTranslator) -> None:
    alone = plan(translator, build_request(token_ids=[1, 2, 3], prompt_logprobs=2)).request
    assert (alone.top_logprobs, alone.prompt_logprobs) == (None, 2)
    zero = plan(translator, build_request(token_ids=[1, 2, 3], top_logprobs=0)).request
    assert (zero.top_logprobs, zero.prompt_logprobs) == (0, None)  # 0 is a value: the chosen tokens' logprobs


def test_text_and_chat_are_tokenized_by_the_model(translator: RequestTranslator, tokenizer) -> None:
    assert plan(translator, build_request(prompt="Hello world, this is a test")).request.prompt_token_ids == [
        9707,
        1879,
        11,
        419,
        374,
        264,
        1273,
    ]
    chat = plan(translator, build_request(messages=[("user", "Hi")])).request.prompt_token_ids
    assert tokenizer.decode(chat) == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    bare = plan(
        translator, build_request(messages=[("user", "Hi")], add_generation_prompt=False)
    ).request.prompt_token_ids
    assert tokenizer.decode(bare) == "<|im_start|>user\nHi<|im_end|>\n"
    no_thinking = plan(
        translator, build_request(messages=[("user", "Hi")], chat_template_kwargs={"enable_thinking": False})
    )
    assert tokenizer.decode(no_thinking.request.prompt_token_ids).endswith(
        "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    )


def test_only_the_templates_own_variables_are_open_to_clients(tokenizer, translator: RequestTranslator) -> None:
    # The embedded ChatML template declares messages, add_generation_prompt and enable_thinking.
    assert client_template_variables(tokenizer) == {"enable_thinking"}
    for key in ("chat_template", "return_dict", "tokenize", "return_tensors", "eos_token", "unknown"):
        error = refusal(translator, build_request(messages=[("user", "x")], chat_template_kwargs={key: "{{ 7 * 7 }}"}))
        assert (error.field, error.reason_name) == (f"chat.template_kwargs.{key}", "INVALID_FIELD"), key
        assert "enable_thinking" in error.message


def test_integral_template_numbers_arrive_as_integers() -> None:
    value = {"n": 3.0, "x": 2.5, "flags": [1.0, True, "a"], "nested": {"m": -4.0}}
    assert integral_numbers_as_ints(value) == {"n": 3, "x": 2.5, "flags": [1, True, "a"], "nested": {"m": -4}}
    assert isinstance(integral_numbers_as_ints(3.0), int) and integral_numbers_as_ints(True) is True


def test_prompts_over_the_character_bound_fail_before_tokenization(translator: RequestTranslator) -> None:
    error = refusal(translator, build_request(prompt="a" * (MAX_CHARS + 1)))
    assert (error.field, error.reason_name) == ("text", "PROMPT_TOO_LONG") and str(MAX_CHARS) in error.message
    error = refusal(translator, build_request(messages=[("system", "a" * 300), ("user", "b" * 101)]))
    assert (error.field, error.reason_name) == ("chat.messages", "PROMPT_TOO_LONG")
    # Right at the bound, the prompt is tokenized (and then found too long for this 64-token context).
    error = refusal(translator, build_request(prompt="word " * (MAX_CHARS // 5)))
    assert (error.field, error.reason_name) == ("text", "CONTEXT_LENGTH_EXCEEDED")


def test_the_constraint_field_is_remembered_for_engine_rejections(translator: RequestTranslator) -> None:
    constrained = plan(translator, build_request(token_ids=[1], regex="a+"))
    assert constrained.constraint_field == "structured_output.regex" and constrained.request.constraint.value == "a+"
    assert plan(translator, build_request(token_ids=[1])).constraint_field is None


@pytest.mark.parametrize(
    ("request_kwargs", "field"),
    [
        ({"token_ids": [1] * 64}, "token_ids"),
        ({"token_ids": [1] * 60, "max_tokens": 5}, "sampling.max_tokens"),
        ({"token_ids": [1, 151936 + 5]}, "token_ids.ids[1]"),
        (
            {"messages": [("user", "x")], "chat_template_kwargs": {"unknown": 1}, "top_logprobs": 99},
            "logprobs.top_logprobs",
        ),
    ],
)
def test_limits_of_the_model_are_enforced(translator: RequestTranslator, request_kwargs: dict, field: str) -> None:
    assert refusal(translator, build_request(**request_kwargs)).field == field


def test_a_model_with_fewer_rows_than_its_tokenizer_refuses_ids_past_its_rows(tokenizer, pool: TokenizerPool) -> None:
    """The DeepSeek-V4 shape (129,280 rows) served with the Qwen tokenizer (151,669 ids): an id past the rows would
    kill the engine in the embedding's gather on a GPU, so token ids, stop ids and tokenized prompts stop here."""
    small = make_translator(tokenizer, pool, ModelFacts(**{**FACTS.__dict__, "vocab_size": 129280}))
    assert plan(small, build_request(token_ids=[1, 129279], max_tokens=1)).request.prompt_token_ids == [1, 129279]
    beyond = refusal(small, build_request(token_ids=[1, 129280], max_tokens=1))
    assert (beyond.reason, beyond.field) == (Reason.TOKEN_OUT_OF_VOCABULARY, "token_ids.ids[1]")
    assert "(ids 0..129279)" in beyond.message
    stop = refusal(small, build_request(token_ids=[1], max_tokens=1, stop_token_ids=[151643]))
    assert (stop.reason, stop.field) == (Reason.TOKEN_OUT_OF_VOCABULARY, "sampling.stop_token_ids[0]")
    # The chat template's own tokens (<|im_start|> is 151644) are past the rows.
    chat = refusal(small, build_request(messages=[("user", "hi")], max_tokens=1))
    assert (chat.reason, chat.field) == (Reason.TOKEN_OUT_OF_VOCABULARY, "chat")
    assert "151644" in chat.message or "151645" in chat.message
    assert plan(small, build_request(prompt="hello world", max_tokens=1)).request.prompt_token_ids


def test_a_model_without_chat_template_refuses_chat(tokenizer, pool: TokenizerPool) -> None:
    no_template = make_translator(tokenizer, pool, ModelFacts(**{**FACTS.__dict__, "has_chat_template": False}))
    error = refusal(no_template, build_request(messages=[("user", "x")]))
    assert error.field == "chat" and "no chat template" in error.message


def test_a_huge_text_is_counted_in_pieces_exactly_as_whole(tokenizer) -> None:
    from server.translation.tokenizer_pool import WHOLE_TEXT_CHARS, _count_in_pieces, _encode

    words = ["alpha", "beta,", "gamma.", "delta42", "  spaced", "\nline", "ünï", "中文"]
    text = " ".join(words[i % len(words)] + str(i % 7) for i in range(WHOLE_TEXT_CHARS // 6))[
        : WHOLE_TEXT_CHARS + 50_000
    ]
    exact = len(tokenizer.backend_tokenizer.encode_batch([text])[0])
    pieces, counted = _count_in_pieces(tokenizer.backend_tokenizer, text)
    assert pieces > 1 and abs(counted - exact) <= 2 * (pieces - 1)
    # Too long for any context: only the count comes back, never the ids.
    assert _encode(tokenizer, text, 8192) == counted
    # A text that fits is encoded whole, as the tokenizer itself encodes it.
    assert _encode(tokenizer, text[:5000], 8192) == tokenizer.encode(text[:5000])


class CopyRecordingTokenizer:
    """Records the thread each copy of it is made in (copying a real tokenizer holds the GIL ~1 s)."""

    def __init__(self, copied_in: list[str]) -> None:
        self.copied_in = copied_in

    def __deepcopy__(self, memo: dict) -> CopyRecordingTokenizer:
        self.copied_in.append(threading.current_thread().name)
        return CopyRecordingTokenizer(self.copied_in)

    def encode(self, text: str) -> list[int]:
        return [len(text)]


def test_the_tokenizer_copies_are_made_before_serving_not_on_the_first_requests() -> None:
    copied_in: list[str] = []
    tokenizers = TokenizerPool(CopyRecordingTokenizer(copied_in), workers=2)
    try:
        made_before_serving = list(copied_in)

        async def two_at_once() -> list[list[int] | int]:
            return await asyncio.gather(tokenizers.encode("abc", 10), tokenizers.encode("abcd", 10))

        assert asyncio.run(two_at_once()) == [[3], [4]]
    finally:
        tokenizers.close()
    assert made_before_serving == [threading.current_thread().name] * 2
    assert copied_in == made_before_serving  # the worker threads copied nothing


def test_a_thread_safe_tokenizer_is_shared_not_copied() -> None:
    copied_in: list[str] = []
    tokenizers = TokenizerPool(CopyRecordingTokenizer(copied_in), workers=2, thread_safe=True)
    try:

        async def two_at_once() -> list[list[int] | int]:
            return await asyncio.gather(tokenizers.encode("abc", 10), tokenizers.encode("abcd", 10))

        assert asyncio.run(two_at_once()) == [[3], [4]]
    finally:
        tokenizers.close()
    assert copied_in == []


def test_a_replay_takes_its_tokens_and_k_in_place_of_the_originals(translator: RequestTranslator) -> None:
    original = build_request(
        token_ids=[1, 2, 3],
        request_id="x" * 300,  # too long for Generate: not the replay's
        coalesce_ms=10**9,  # likewise
        include_text=True,
        top_logprobs=2,
        prompt_logprobs=1,
        logprobs_mode="raw",
        chain_top_logprobs=True,
        enforced_token_ids=[9, 9],
        temperature=0.5,
    )
    replay = asyncio.run(translator.replay(original, "r-1", [4, 5], 3))
    assert (replay.chain_top_logprobs, replay.coalesce_seconds, replay.max_tokens_per_message) == (False, 0, 0)
    request = replay.request
    assert (request.enforced_token_ids, request.top_logprobs, request.prompt_logprobs) == ((4, 5), 3, 1)
    assert (request.logprobs_mode, request.include_text, request.request_id) == (None, False, "r-1")
    assert request.sampling["temperature"] == 0.5


def test_a_replay_without_k_keeps_the_originals_logprobs_and_forces_nothing(translator: RequestTranslator) -> None:
    original = build_request(token_ids=[1, 2, 3], top_logprobs=2, logprobs_mode="raw", enforced_token_ids=[9])
    request = asyncio.run(translator.replay(original, "r-1", ())).request
    assert (request.enforced_token_ids, request.top_logprobs, request.logprobs_mode) == (None, 2, LogprobsMode.RAW)


def test_a_replays_k_and_outputs_are_checked_as_generates(translator: RequestTranslator) -> None:
    with pytest.raises(ServiceError) as too_wide:
        asyncio.run(translator.replay(build_request(token_ids=[1, 2, 3]), "r-1", [4], FACTS.max_logprobs + 1))
    assert too_wide.value.field == "logprobs.top_logprobs"
    with pytest.raises(ServiceError) as several:
        asyncio.run(translator.replay(build_request(token_ids=[1, 2, 3], n=2), "r-1", [4], 1))
    assert several.value.field == "sampling.n"
