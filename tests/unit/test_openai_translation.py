"""The inference port's translation of an OpenAI body onto the contract's GenerateRequest (the fields, the network's
validator rules on enforced_tokens) and of the engine's steps onto vLLM's answer shapes with decimal token ids.
(Against the real server: tests/e2e/test_http_inference.py.)"""

from __future__ import annotations

import math

import pytest

from engine_ext.generation.outputs import Finish, FinishReason, GenerationStep, LogprobColumns, OutputDelta
from engine_ext.model_facts import ModelFacts
from gonka.mlnode.v1 import inference_pb2 as pb
from server.core.errors import invalid_field
from server.http.errors import HttpError
from server.http.openai_models import ChatCompletionBody, CompletionBody
from server.http.openai_responses import OpenAIAnswer
from server.http.openai_translation import chat_request, completion_request, openai_error

FACTS = ModelFacts(
    served_model_name="tiny",
    model_path="/m",
    max_model_len=64,
    vocab_size=1000,
    tokenizer_max_token_id=990,
    eos_token_id=999,
    bos_token_id=None,
    dtype="bfloat16",
    max_logprobs=20,
    tensor_parallel_size=1,
    has_chat_template=True,
)
MESSAGES = [{"role": "system", "content": "be brief"}, {"role": "user", "content": [{"type": "text", "text": "hi"}]}]


def chat(**fields: object) -> pb.GenerateRequest:
    return chat_request(ChatCompletionBody.model_validate({"messages": MESSAGES, **fields}), "r1", FACTS)


def test_a_chat_body_becomes_the_contracts_request_with_vllms_names() -> None:
    request = chat(
        max_tokens=9,
        max_completion_tokens=7,
        temperature=0.5,
        seed=-3,
        stop="END",
        logprobs=True,
        top_logprobs=5,
        logprobs_mode="raw_logprobs",
        skip_special_tokens=False,
        chat_template_kwargs={"enable_thinking": False},
        user="ignored",
    )
    assert [(m.role, m.content) for m in request.chat.messages] == [
        (pb.CHAT_ROLE_SYSTEM, "be brief"),
        (pb.CHAT_ROLE_USER, "hi"),
    ]
    assert request.chat.template_kwargs["enable_thinking"] is False
    # max_completion_tokens wins over max_tokens, as in vLLM.
    assert request.sampling.max_tokens == 7
    assert (request.sampling.temperature, request.sampling.seed, list(request.sampling.stop)) == (0.5, -3, ["END"])
    assert request.sampling.skip_special_tokens is False
    assert (request.logprobs.top_logprobs, request.logprobs.mode) == (5, pb.LOGPROBS_MODE_RAW)
    assert request.stream.include_text and request.stream.final_only
    assert not chat(stream=True).stream.final_only
    # Unset: the engine's defaults (max_tokens: the rest of the context, as vLLM's chat endpoint).
    assert not chat().sampling.HasField("max_tokens") and not chat().HasField("logprobs")


def test_unset_sampling_fields_take_the_models_defaults_as_vllms_server_gives_them() -> None:
    facts = ModelFacts(**{**FACTS.__dict__, "sampling_defaults": (("temperature", 0.7), ("top_k", 20))})
    body = ChatCompletionBody.model_validate({"messages": MESSAGES})
    defaulted = chat_request(body, "r", facts).sampling
    assert defaulted.temperature == pytest.approx(0.7) and defaulted.top_k == 20
    assert not defaulted.HasField("top_p")
    given = chat_request(ChatCompletionBody.model_validate({"messages": MESSAGES, "temperature": 0}), "r", facts)
    assert given.sampling.temperature == 0 and given.sampling.top_k == 20


def test_completions_take_one_prompt_as_text_or_ids_with_vllms_default_of_16_tokens() -> None:
    text = completion_request(CompletionBody.model_validate({"prompt": "hello"}), "r", FACTS)
    assert (text.text, text.sampling.max_tokens) == ("hello", 16)
    ids = completion_request(CompletionBody.model_validate({"prompt": [[1, 2, 3]], "logprobs": 2}), "r", FACTS)
    assert (list(ids.token_ids.ids), ids.logprobs.top_logprobs) == ([1, 2, 3], 2)
    with pytest.raises(HttpError) as refused:
        completion_request(CompletionBody.model_validate({"prompt": ["a", "b"]}), "r", FACTS)
    assert (refused.value.status, refused.value.param) == (400, "prompt")


def test_top_logprobs_needs_logprobs_as_in_vllm() -> None:
    with pytest.raises(HttpError) as refused:
        chat(top_logprobs=3)
    assert (refused.value.status, refused.value.param) == (400, "top_logprobs")


def test_enforced_tokens_become_the_replays_ids() -> None:
    tokens = [{"token": "17", "top_tokens": ["17", "4"]}, {"token": 990, "top_tokens": []}]
    assert list(chat(max_tokens=2, enforced_tokens={"tokens": tokens}).enforced_token_ids) == [17, 990]
    # 64 top tokens at a position are within the bound.
    assert chat(enforced_tokens={"tokens": [{"token": "5", "top_tokens": [str(i) for i in range(64)]}]})


@pytest.mark.parametrize(
    ("tokens", "max_tokens", "named"),
    [
        ([{"token": "5", "top_tokens": [str(i) for i in range(65)]}], None, "exceed the bound of 64"),
        ([{"token": "Hello"}], None, "not a decimal token id"),
        ([{"token": "<EMPTY>"}], None, "not a decimal token id"),
        ([{"token": "+5"}], None, "not a decimal token id"),
        ([{"token": "5", "top_tokens": ["-1"]}], None, "not a decimal token id"),
        ([{"token": "5", "top_tokens": ["1000"]}], None, "outside the vocabulary"),
        ([{"token": -1}], None, "outside the vocabulary"),
        ([{"token": "5"}] * 3, 2, "exceed max_tokens 2"),
    ],
)
def test_each_validator_rule_is_a_400_naming_enforced_tokens(tokens: list, max_tokens: int | None, named: str) -> None:
    with pytest.raises(HttpError) as refused:
        chat(max_tokens=max_tokens, enforced_tokens={"tokens": tokens})
    assert (refused.value.status, refused.value.param) == (400, "enforced_tokens")
    assert named in refused.value.message


def test_the_shared_checks_name_the_field_as_the_openai_body_spells_it() -> None:
    assert openai_error(invalid_field("sampling.max_tokens", "x")).field == "max_tokens"
    assert openai_error(invalid_field("logprobs.top_logprobs", "x")).field == "top_logprobs"
    assert openai_error(invalid_field("enforced_token_ids[3]", "x")).field == "enforced_tokens"


def step(tokens: list[int], columns: LogprobColumns, finish: Finish | None = None) -> GenerationStep:
    return GenerationStep([OutputDelta(0, tokens, columns, "ab", finish)], finished=finish is not None)


def test_chat_logprobs_are_decimal_ids_with_the_chains_list_and_vllms_floor() -> None:
    answer = OpenAIAnswer("chat", "r", "tiny", [1, 2, 3], 1, 2, return_token_ids=True)
    # Position 0 sampled 7, outside the model's top 2 (5, 6); position 1 sampled the top token 5.
    columns = LogprobColumns([-3.0, -math.inf], [3, 1], [5, 6, 5, 8], [-0.1, -0.2, -math.inf, -math.inf])
    chunks = answer.add(step([7, 5], columns, Finish(FinishReason.LENGTH, None, 3, 0)))
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert chunks[0]["prompt_token_ids"] == [1, 2, 3]
    body = answer.body()
    content = body["choices"][0]["logprobs"]["content"]
    assert [(e["token"], e["logprob"]) for e in content] == [("7", -3.0), ("5", -9999.0)]
    assert [[(t["token"], t["logprob"]) for t in e["top_logprobs"]] for e in content] == [
        [("7", -3.0), ("5", -0.1)],
        [("5", -9999.0), ("8", -9999.0)],
    ]
    assert body["choices"][0]["finish_reason"] == "length" and body["choices"][0]["token_ids"] == [7, 5]
    assert body["usage"] == {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    assert body["choices"][0]["message"]["content"] == "ab"


def test_completion_logprobs_list_the_sampled_token_and_the_models_top_k() -> None:
    answer = OpenAIAnswer("completion", "r", "tiny", [1], 1, 2, return_token_ids=False)
    answer.add(step([7], LogprobColumns([-3.0], [3], [5, 6], [-0.1, -0.2]), Finish(FinishReason.STOP, 7, 1, 0)))
    choice = answer.body()["choices"][0]
    assert choice["logprobs"]["tokens"] == ["7"]
    assert choice["logprobs"]["top_logprobs"] == [{"7": -3.0, "5": -0.1, "6": -0.2}]
    assert (choice["finish_reason"], choice["stop_reason"], choice["text"]) == ("stop", 7, "ab")
