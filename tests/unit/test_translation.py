"""GenerateRequest -> prompt ids and SamplingParams, with the embedded model's real tokenizer."""

from __future__ import annotations

import pytest
from vllm.sampling_params import RequestOutputKind, SamplingParams

from gonka.mlnode.client import build_request
from server.errors import ServiceError
from server.model_facts import ModelFacts
from server.translation import RequestTranslator

FACTS = ModelFacts(
    served_model_name="tiny", model_path="/m", max_model_len=64, vocab_size=151936, tokenizer_max_token_id=151668,
    eos_token_id=151645, bos_token_id=None, dtype="bfloat16", max_logprobs=20, tensor_parallel_size=1,
    has_chat_template=True,
)


@pytest.fixture(scope="module")
def translator(tokenizer) -> RequestTranslator:
    return RequestTranslator(FACTS, tokenizer)


def test_unset_sampling_fields_keep_vllms_defaults(translator: RequestTranslator) -> None:
    params = translator.plan(build_request(token_ids=[1, 2, 3])).sampling_params
    default = SamplingParams()
    for name in ("temperature", "top_p", "top_k", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty", "seed", "n", "ignore_eos", "skip_special_tokens"):
        assert getattr(params, name) == getattr(default, name), name
    assert params.logprobs is None and params.prompt_logprobs is None
    # No text asked and no stop strings: the server does not detokenize at all.
    assert params.detokenize is False and params.output_kind == RequestOutputKind.DELTA


def test_set_fields_are_passed_through(translator: RequestTranslator) -> None:
    request = build_request(
        token_ids=[1, 2, 3], temperature=0.8, top_p=0.5, top_k=7, min_p=0.25, presence_penalty=0.5, frequency_penalty=-0.5,
        repetition_penalty=1.5, seed=-3, max_tokens=9, min_tokens=2, stop=["x"], stop_token_ids=[5], ignore_eos=True, n=2,
        skip_special_tokens=False, top_logprobs=5, prompt_logprobs=1, final_only=True,
    )
    plan = translator.plan(request)
    params = plan.sampling_params
    assert (params.temperature, params.top_p, params.top_k, params.min_p) == (pytest.approx(0.8), 0.5, 7, 0.25)
    assert (params.presence_penalty, params.frequency_penalty, params.repetition_penalty) == (0.5, -0.5, 1.5)
    assert (params.seed, params.max_tokens, params.min_tokens, params.n) == (-3, 9, 2, 2)
    assert params.stop == ["x"] and 5 in params.stop_token_ids and params.ignore_eos and not params.skip_special_tokens
    assert (params.logprobs, params.prompt_logprobs, params.flat_logprobs) == (5, 1, True)
    assert params.detokenize is True  # stop strings need text
    assert params.output_kind == RequestOutputKind.FINAL_ONLY
    assert (plan.top_logprobs, plan.prompt_logprobs) == (5, 1)


def test_text_and_chat_are_tokenized_by_the_model(translator: RequestTranslator, tokenizer) -> None:
    assert translator.plan(build_request(prompt="Hello world, this is a test")).prompt_token_ids == [9707, 1879, 11, 419, 374, 264, 1273]
    chat = translator.plan(build_request(messages=[("user", "Hi")])).prompt_token_ids
    assert tokenizer.decode(chat) == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    bare = translator.plan(build_request(messages=[("user", "Hi")], add_generation_prompt=False)).prompt_token_ids
    assert tokenizer.decode(bare) == "<|im_start|>user\nHi<|im_end|>\n"


def test_the_constraint_field_is_remembered_for_engine_rejections(translator: RequestTranslator) -> None:
    assert translator.plan(build_request(token_ids=[1], regex="a+")).constraint_field == "structured_output.regex"
    assert translator.plan(build_request(token_ids=[1])).constraint_field is None


@pytest.mark.parametrize(
    ("request_kwargs", "field"),
    [
        ({"token_ids": [1] * 64}, "token_ids"),
        ({"token_ids": [1] * 60, "max_tokens": 5}, "sampling.max_tokens"),
        ({"token_ids": [1, 151936 + 5]}, "token_ids.ids[1]"),
        ({"messages": [("user", "x")], "chat_template_kwargs": {"unknown": 1}, "top_logprobs": 99}, "logprobs.top_logprobs"),
    ],
)
def test_limits_of_the_model_are_enforced(translator: RequestTranslator, request_kwargs: dict, field: str) -> None:
    with pytest.raises(ServiceError) as caught:
        translator.plan(build_request(**request_kwargs))
    assert caught.value.field == field


def test_a_model_without_chat_template_refuses_chat(tokenizer) -> None:
    no_template = RequestTranslator(ModelFacts(**{**FACTS.__dict__, "has_chat_template": False}), tokenizer)
    with pytest.raises(ServiceError) as caught:
        no_template.plan(build_request(messages=[("user", "x")]))
    assert caught.value.field == "chat" and "no chat template" in caught.value.message
