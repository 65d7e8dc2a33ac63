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
    "negative temperature": (build_request(token_ids=PROMPT_IDS, temperature=-0.5), "INVALID_FIELD", "sampling.temperature"),
    "nan temperature": (build_request(token_ids=PROMPT_IDS, temperature=float("nan")), "INVALID_FIELD", "sampling.temperature"),
    "top_k below -1": (build_request(token_ids=PROMPT_IDS, top_k=-2), "INVALID_FIELD", "sampling.top_k"),
    "min_p above 1": (build_request(token_ids=PROMPT_IDS, min_p=1.5), "INVALID_FIELD", "sampling.min_p"),
    "presence penalty above 2": (build_request(token_ids=PROMPT_IDS, presence_penalty=3.0), "INVALID_FIELD", "sampling.presence_penalty"),
    "zero repetition penalty": (build_request(token_ids=PROMPT_IDS, repetition_penalty=0.0), "INVALID_FIELD", "sampling.repetition_penalty"),
    "n zero": (build_request(token_ids=PROMPT_IDS, n=0), "INVALID_FIELD", "sampling.n"),
    "min_tokens above max_tokens": (build_request(token_ids=PROMPT_IDS, max_tokens=4, min_tokens=9), "INVALID_FIELD", "sampling.min_tokens"),
    "empty stop string": (build_request(token_ids=PROMPT_IDS, stop=["ok", ""]), "INVALID_FIELD", "sampling.stop[1]"),
    "token id outside the vocabulary": (build_request(token_ids=[1, 2, 151936]), "TOKEN_OUT_OF_VOCABULARY", "token_ids.ids[2]"),
    "stop token id outside the vocabulary": (build_request(token_ids=PROMPT_IDS, stop_token_ids=[7, 10**9]), "TOKEN_OUT_OF_VOCABULARY", "sampling.stop_token_ids[1]"),
    "prompt longer than the context": (build_request(token_ids=[100] * 9000), "CONTEXT_LENGTH_EXCEEDED", "token_ids"),
    "max_tokens past the context": (build_request(token_ids=[100] * 8000, max_tokens=500), "CONTEXT_LENGTH_EXCEEDED", "sampling.max_tokens"),
    "too many top logprobs": (build_request(token_ids=PROMPT_IDS, top_logprobs=21), "INVALID_FIELD", "logprobs.top_logprobs"),
    "too many prompt logprobs": (build_request(token_ids=PROMPT_IDS, top_logprobs=1, prompt_logprobs=50), "INVALID_FIELD", "logprobs.prompt_logprobs"),
    "schema that is not JSON": (build_request(token_ids=PROMPT_IDS, json_schema="{not json"), "INVALID_CONSTRAINT", "structured_output.json_schema"),
    "schema that is not an object": (build_request(token_ids=PROMPT_IDS, json_schema="[1, 2]"), "INVALID_CONSTRAINT", "structured_output.json_schema"),
    "schema with an unknown type": (build_request(token_ids=PROMPT_IDS, json_schema='{"type": "bogus"}'), "INVALID_CONSTRAINT", "structured_output.json_schema"),
    "malformed regex": (build_request(token_ids=PROMPT_IDS, regex="([a-z"), "INVALID_CONSTRAINT", "structured_output.regex"),
    "malformed grammar": (build_request(token_ids=PROMPT_IDS, grammar="root ::= ("), "INVALID_CONSTRAINT", "structured_output.grammar"),
    "empty choice list": (raw_request(token_ids=pb.TokenIds(ids=PROMPT_IDS), structured_output=pb.StructuredOutput(choice=pb.ChoiceList())), "INVALID_CONSTRAINT", "structured_output.choice.choices"),
    "unknown chat role value": (raw_request(chat=pb.ChatInput(messages=[pb.ChatMessage(role=42, content="hi")])), "INVALID_FIELD", "chat.messages[0].role"),
    "unspecified chat role": (raw_request(chat=pb.ChatInput(messages=[pb.ChatMessage(content="hi")])), "INVALID_FIELD", "chat.messages[0].role"),
    "no chat messages": (raw_request(chat=pb.ChatInput()), "INVALID_FIELD", "chat.messages"),
    "no input at all": (raw_request(), "INVALID_FIELD", "input"),
    "empty text": (raw_request(text=""), "INVALID_FIELD", "text"),
    "empty token ids": (raw_request(token_ids=pb.TokenIds()), "INVALID_FIELD", "token_ids.ids"),
    "request id too long": (build_request(token_ids=PROMPT_IDS, request_id="x" * 300), "INVALID_FIELD", "request_id"),
    "coalescing window too long": (build_request(token_ids=PROMPT_IDS, coalesce_ms=60_001), "INVALID_FIELD", "stream.coalesce_ms"),
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
