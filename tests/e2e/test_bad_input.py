"""Bad input: INVALID_ARGUMENT naming the field, a stable reason, and the engine keeps serving."""

from __future__ import annotations

import grpc
import pytest

from gonka.mlnode.client import InferenceClient, ServerError, build_request
from gonka.mlnode.v1 import inference_pb2 as pb

PROMPT_IDS = [9707, 1879, 11, 419, 374, 264, 1273]


def raw_request(**fields) -> pb.GenerateRequest:
    return pb.GenerateRequest(**fields)


BAD_REQUESTS = {
    "negative max_tokens": (build_request(token_ids=PROMPT_IDS, max_tokens=-5), "INVALID_FIELD", "sampling.max_tokens"),
    "zero max_tokens": (build_request(token_ids=PROMPT_IDS, max_tokens=0), "INVALID_FIELD", "sampling.max_tokens"),
    "top_p above 1": (build_request(token_ids=PROMPT_IDS, top_p=1.5), "INVALID_FIELD", "sampling.top_p"),
    "top_p zero": (build_request(token_ids=PROMPT_IDS, top_p=0.0), "INVALID_FIELD", "sampling.top_p"),
    "negative temperature": (
        build_request(token_ids=PROMPT_IDS, temperature=-0.5),
        "INVALID_FIELD",
        "sampling.temperature",
    ),
    "nan temperature": (
        build_request(token_ids=PROMPT_IDS, temperature=float("nan")),
        "INVALID_FIELD",
        "sampling.temperature",
    ),
    "top_k below -1": (build_request(token_ids=PROMPT_IDS, top_k=-2), "INVALID_FIELD", "sampling.top_k"),
    "min_p above 1": (build_request(token_ids=PROMPT_IDS, min_p=1.5), "INVALID_FIELD", "sampling.min_p"),
    "presence penalty above 2": (
        build_request(token_ids=PROMPT_IDS, presence_penalty=3.0),
        "INVALID_FIELD",
        "sampling.presence_penalty",
    ),
    "zero repetition penalty": (
        build_request(token_ids=PROMPT_IDS, repetition_penalty=0.0),
        "INVALID_FIELD",
        "sampling.repetition_penalty",
    ),
    "n zero": (build_request(token_ids=PROMPT_IDS, n=0), "INVALID_FIELD", "sampling.n"),
    "min_tokens above max_tokens": (
        build_request(token_ids=PROMPT_IDS, max_tokens=4, min_tokens=9),
        "INVALID_FIELD",
        "sampling.min_tokens",
    ),
    "empty stop string": (build_request(token_ids=PROMPT_IDS, stop=["ok", ""]), "INVALID_FIELD", "sampling.stop[1]"),
    "token id outside the vocabulary": (
        build_request(token_ids=[1, 2, 151936]),
        "TOKEN_OUT_OF_VOCABULARY",
        "token_ids.ids[2]",
    ),
    "stop token id outside the vocabulary": (
        build_request(token_ids=PROMPT_IDS, stop_token_ids=[7, 10**9]),
        "TOKEN_OUT_OF_VOCABULARY",
        "sampling.stop_token_ids[1]",
    ),
    "prompt longer than the context": (build_request(token_ids=[100] * 9000), "CONTEXT_LENGTH_EXCEEDED", "token_ids"),
    "max_tokens past the context": (
        build_request(token_ids=[100] * 8000, max_tokens=500),
        "CONTEXT_LENGTH_EXCEEDED",
        "sampling.max_tokens",
    ),
    "too many top logprobs": (
        build_request(token_ids=PROMPT_IDS, top_logprobs=21),
        "INVALID_FIELD",
        "logprobs.top_logprobs",
    ),
    "too many prompt logprobs": (
        build_request(token_ids=PROMPT_IDS, top_logprobs=1, prompt_logprobs=50),
        "INVALID_FIELD",
        "logprobs.prompt_logprobs",
    ),
    "schema that is not JSON": (
        build_request(token_ids=PROMPT_IDS, json_schema="{not json"),
        "INVALID_CONSTRAINT",
        "structured_output.json_schema",
    ),
    "schema that is not an object": (
        build_request(token_ids=PROMPT_IDS, json_schema="[1, 2]"),
        "INVALID_CONSTRAINT",
        "structured_output.json_schema",
    ),
    "schema with an unknown type": (
        build_request(token_ids=PROMPT_IDS, json_schema='{"type": "bogus"}'),
        "INVALID_CONSTRAINT",
        "structured_output.json_schema",
    ),
    "malformed regex": (
        build_request(token_ids=PROMPT_IDS, regex="([a-z"),
        "INVALID_CONSTRAINT",
        "structured_output.regex",
    ),
    "malformed grammar": (
        build_request(token_ids=PROMPT_IDS, grammar="root ::= ("),
        "INVALID_CONSTRAINT",
        "structured_output.grammar",
    ),
    "empty choice list": (
        raw_request(
            token_ids=pb.TokenIds(ids=PROMPT_IDS), structured_output=pb.StructuredOutput(choice=pb.ChoiceList())
        ),
        "INVALID_CONSTRAINT",
        "structured_output.choice.choices",
    ),
    "unknown chat role value": (
        raw_request(chat=pb.ChatInput(messages=[pb.ChatMessage(role=42, content="hi")])),
        "INVALID_FIELD",
        "chat.messages[0].role",
    ),
    "unspecified chat role": (
        raw_request(chat=pb.ChatInput(messages=[pb.ChatMessage(content="hi")])),
        "INVALID_FIELD",
        "chat.messages[0].role",
    ),
    "no chat messages": (raw_request(chat=pb.ChatInput()), "INVALID_FIELD", "chat.messages"),
    "no input at all": (raw_request(), "INVALID_FIELD", "input"),
    "empty text": (raw_request(text=""), "INVALID_FIELD", "text"),
    "empty token ids": (raw_request(token_ids=pb.TokenIds()), "INVALID_FIELD", "token_ids.ids"),
    "request id too long": (build_request(token_ids=PROMPT_IDS, request_id="x" * 300), "INVALID_FIELD", "request_id"),
    "coalescing window too long": (
        build_request(token_ids=PROMPT_IDS, coalesce_ms=60_001),
        "INVALID_FIELD",
        "stream.coalesce_ms",
    ),
    # A client's own template is the route of CVE-2025-61620; return_dict would make the prompt a dict's keys.
    "a client-supplied chat template": (
        build_request(messages=[("user", "hi")], chat_template_kwargs={"chat_template": "{{ 7 * 7 }}"}),
        "INVALID_FIELD",
        "chat.template_kwargs.chat_template",
    ),
    "a Hugging Face parameter as template variable": (
        build_request(messages=[("user", "hi")], chat_template_kwargs={"return_dict": True}),
        "INVALID_FIELD",
        "chat.template_kwargs.return_dict",
    ),
    "text over the character bound": (build_request(prompt="x" * (16 * 8192 + 1)), "PROMPT_TOO_LONG", "text"),
    "chat over the character bound": (
        build_request(messages=[("user", "y" * (16 * 8192 + 1))]),
        "PROMPT_TOO_LONG",
        "chat.messages",
    ),
}


@pytest.mark.parametrize("case", list(BAD_REQUESTS), ids=list(BAD_REQUESTS))
def test_bad_input_is_invalid_argument_naming_the_field(client: InferenceClient, case: str) -> None:
    request, reason, field = BAD_REQUESTS[case]
    with pytest.raises(ServerError) as caught:
        client.generate(request, timeout=60)
    error = caught.value
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT, error
    assert (error.reason, error.field) == (reason, field), error
    assert field in error.message


def test_the_engine_keeps_serving_after_bad_input(client: InferenceClient) -> None:
    for request, _, _ in BAD_REQUESTS.values():
        with pytest.raises(ServerError):
            client.generate(request, timeout=60)
    result = client.generate(token_ids=PROMPT_IDS, max_tokens=4, temperature=0.0)
    assert len(result.first.token_ids) == 4 and result.first.finish_reason == "length"
    status = client.server_status()
    assert (status.running_requests, status.waiting_requests, status.active_streams) == (0, 0, 0)


GENERATE = "/gonka.mlnode.v1.InferenceService/Generate"
GET_MODEL_INFO = "/gonka.mlnode.v1.InferenceService/GetModelInfo"
VALID_BYTES = build_request(prompt="hi", max_tokens=2).SerializeToString()


@pytest.mark.parametrize(
    ("method", "payload"),
    [
        (GENERATE, b"\x0a\xff\xff\xff"),  # a length prefix running past the end
        (GENERATE, VALID_BYTES.replace(b"hi", b"\xff\xfe")),  # invalid UTF-8 in a string field
        (GET_MODEL_INFO, b"\x08"),  # a field tag without its value
    ],
    ids=["corrupt-generate", "bad-utf8-generate", "corrupt-unary"],
)
def test_undecodable_request_bytes_are_invalid_argument(server, method: str, payload: bytes) -> None:
    with grpc.insecure_channel(server.target) as channel:
        if method == GENERATE:
            call = channel.unary_stream(method, request_serializer=None, response_deserializer=None)
            attempt = lambda: list(call(payload, timeout=30))  # noqa: E731
        else:
            call = channel.unary_unary(method, request_serializer=None, response_deserializer=None)
            attempt = lambda: call(payload, timeout=30)  # noqa: E731
        with pytest.raises(grpc.RpcError) as caught:
            attempt()
    error = ServerError.from_rpc_error(caught.value)
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT and error.reason == "MALFORMED_REQUEST", error
    assert "gonka.mlnode.v1." in error.message


def test_a_request_over_the_size_limit_is_refused_by_grpc_itself(client: InferenceClient) -> None:
    with pytest.raises(ServerError) as caught:
        client.generate(build_request(prompt="z" * (16 * 1024 * 1024 + 1)), timeout=60)
    assert caught.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert client.generate(token_ids=PROMPT_IDS, max_tokens=2).first.finish_reason == "length"


def test_a_schema_only_another_backend_could_enforce_is_invalid_constraint(client: InferenceClient) -> None:
    """The backend is pinned to xgrammar, which has no `multipleOf`: vLLM's "auto" would have handed this
    schema to guidance; here the engine refuses it, naming the field."""
    schema = '{"type": "object", "properties": {"n": {"type": "integer", "multipleOf": 3}}, "required": ["n"]}'
    with pytest.raises(ServerError) as caught:
        client.generate(build_request(token_ids=PROMPT_IDS, json_schema=schema, max_tokens=8), timeout=60)
    error = caught.value
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT, error
    assert (error.reason, error.field) == ("INVALID_CONSTRAINT", "structured_output.json_schema"), error
    assert "not supported by xgrammar" in error.message
