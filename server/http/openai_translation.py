"""An OpenAI-style request body as the gRPC contract's GenerateRequest: the inference port runs on the server's own
generation path (server.translation and the engine behind InferenceService), so every check, limit and the replay
are the gRPC service's. The network's validator rules on `enforced_tokens` (spec section 4) are checked here, each
refusal a 400 naming `enforced_tokens`: a validator reads any other 4xx as "the executor's request was bad" and
lets a cheating executor pass."""

from __future__ import annotations

import json

from google.protobuf.struct_pb2 import Struct

from engine_ext.model_facts import ModelFacts
from gonka.mlnode.v1 import inference_pb2 as pb
from server.core.errors import ServiceError
from server.http.errors import HttpError
from server.http.openai_models import (
    ChatCompletionBody,
    ChatMessage,
    CompletionBody,
    EnforcedTokens,
    SamplingFields,
)
from server.translation.replay import LOGPROBS_MODE_VALUES

ENFORCED_TOKENS = "enforced_tokens"
# The per-position bound of the deployed plugin (the API node's maxReplayTopTokensPerPosition).
MAX_TOP_TOKENS_PER_POSITION = 64
INT32_MAX = 2**31 - 1
CHAT_ROLES = {
    "system": pb.CHAT_ROLE_SYSTEM,
    "developer": pb.CHAT_ROLE_SYSTEM,
    "user": pb.CHAT_ROLE_USER,
    "assistant": pb.CHAT_ROLE_ASSISTANT,
    "tool": pb.CHAT_ROLE_TOOL,
}
# The contract's field names as the OpenAI body spells them (a refusal names the field the client sent).
OPENAI_PARAMS = {
    "logprobs.top_logprobs": "top_logprobs",
    "enforced_token_ids": ENFORCED_TOKENS,
    "chat.messages": "messages",
    "chat.template_kwargs": "chat_template_kwargs",
    "text": "prompt",
    "token_ids.ids": "prompt",
    "structured_output.json_schema": "response_format",
    "structured_output.json_object": "response_format",
}


def chat_request(body: ChatCompletionBody, request_id: str, facts: ModelFacts) -> pb.GenerateRequest:
    request = pb.GenerateRequest(request_id=request_id)
    request.chat.CopyFrom(chat_input(body.messages, body.add_generation_prompt, body.chat_template_kwargs))
    if body.top_logprobs is not None and not body.logprobs:
        raise HttpError(400, "BadRequestError", "top_logprobs: needs logprobs set to true", "top_logprobs")
    if body.logprobs:
        request.logprobs.top_logprobs = _non_negative(body.top_logprobs or 0, "top_logprobs")
    max_tokens = body.max_completion_tokens if body.max_completion_tokens is not None else body.max_tokens
    _fill_sampling(request, body, max_tokens, facts)
    return request


def completion_request(body: CompletionBody, request_id: str, facts: ModelFacts) -> pb.GenerateRequest:
    request = pb.GenerateRequest(request_id=request_id)
    prompt = body.prompt
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], (str, list)):
        # A batch of prompts: this server answers one prompt per request.
        if len(prompt) != 1:
            raise HttpError(400, "BadRequestError", "prompt: one prompt per request on this server", "prompt")
        prompt = prompt[0]
    if isinstance(prompt, str):
        request.text = prompt
    else:
        if any(token < 0 for token in prompt):  # type: ignore[operator]
            raise HttpError(400, "BadRequestError", "prompt: token ids must be >= 0", "prompt")
        request.token_ids.ids.extend(prompt)  # type: ignore[arg-type]
    if body.logprobs is not None:
        request.logprobs.top_logprobs = body.logprobs
    _fill_sampling(request, body, body.max_tokens, facts)
    return request


def chat_input(messages: list[ChatMessage], add_generation_prompt: bool, template_kwargs: dict | None) -> pb.ChatInput:
    chat = pb.ChatInput(add_generation_prompt=add_generation_prompt)
    for index, message in enumerate(messages):
        role = CHAT_ROLES.get(message.role)
        if role is None:
            known = ", ".join(CHAT_ROLES)
            raise HttpError(
                400, "BadRequestError", f"messages[{index}].role: {message.role!r} is none of {known}", "messages"
            )
        chat.messages.add(role=role, content=_content_text(message))
    if template_kwargs:
        kwargs = Struct()
        kwargs.update(template_kwargs)
        chat.template_kwargs.CopyFrom(kwargs)
    return chat


def openai_error(error: ServiceError) -> ServiceError:
    """The shared checks' refusal, naming the field as the OpenAI body spells it."""
    if error.field is not None:
        name = error.field.split("[", 1)[0]
        error.field = OPENAI_PARAMS.get(name, name.removeprefix("sampling."))
    return error


def _fill_sampling(
    request: pb.GenerateRequest, body: SamplingFields, max_tokens: int | None, facts: ModelFacts
) -> None:
    sampling = request.sampling
    # An unset field takes the model's default, as vLLM's OpenAI server gives it (the engine's own is neutral).
    defaults = dict(facts.sampling_defaults)
    for name in ("temperature", "top_p", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty"):
        value = getattr(body, name)
        if value is None:
            value = defaults.get(name)
        if value is not None:
            setattr(sampling, name, value)
    top_k = body.top_k if body.top_k is not None else defaults.get("top_k")
    if top_k is not None:
        sampling.top_k = max(-1, min(int(top_k), INT32_MAX))
    if body.seed is not None:
        sampling.seed = body.seed
    if max_tokens is not None:
        # A bound past int32 is past any context: the shared check refuses it as not fitting.
        sampling.max_tokens = min(max_tokens, INT32_MAX)
    if body.min_tokens:
        sampling.min_tokens = min(_non_negative(body.min_tokens, "min_tokens"), INT32_MAX)
    if body.n != 1:
        sampling.n = max(0, min(body.n, INT32_MAX))
    sampling.ignore_eos = body.ignore_eos
    sampling.skip_special_tokens = body.skip_special_tokens
    sampling.include_stop_str_in_output = body.include_stop_str_in_output
    stops = [body.stop] if isinstance(body.stop, str) else (body.stop or [])
    sampling.stop.extend(stop for stop in stops if stop)
    stop_ids = body.stop_token_ids or []
    if any(token < 0 for token in stop_ids):
        raise HttpError(400, "BadRequestError", "stop_token_ids: token ids must be >= 0", "stop_token_ids")
    sampling.stop_token_ids.extend(min(token, INT32_MAX) for token in stop_ids)
    if body.logprobs_mode is not None:
        request.logprobs.mode = LOGPROBS_MODE_VALUES[body.logprobs_mode]
    _fill_response_format(request, body)
    request.stream.include_text = True
    request.stream.final_only = not body.stream
    if body.enforced_tokens is not None:
        request.enforced_token_ids.extend(enforced_token_ids(body.enforced_tokens, max_tokens, facts))


def _fill_response_format(request: pb.GenerateRequest, body: SamplingFields) -> None:
    chosen = body.response_format
    if chosen is None or chosen.type == "text":
        return
    if chosen.type == "json_object":
        request.structured_output.json_object = True
        return
    schema = (chosen.json_schema or {}).get("schema")
    if schema is None:
        raise HttpError(400, "BadRequestError", "response_format.json_schema.schema is required", "response_format")
    request.structured_output.json_schema = json.dumps(schema)


def enforced_token_ids(enforced: EnforcedTokens, max_tokens: int | None, facts: ModelFacts) -> list[int]:
    """The replayed tokens; a fault anywhere in the list (an id not an integer or outside the vocabulary, more than
    64 top tokens at a position, more positions than max_tokens) is a 400 naming enforced_tokens."""
    positions = enforced.tokens
    if max_tokens is not None and len(positions) > max_tokens:
        raise _enforced_refusal(f"{len(positions)} positions exceed max_tokens {max_tokens}")
    ids = []
    for index, position in enumerate(positions):
        if len(position.top_tokens) > MAX_TOP_TOKENS_PER_POSITION:
            raise _enforced_refusal(
                f"tokens[{index}].top_tokens: {len(position.top_tokens)} tokens exceed the bound of "
                f"{MAX_TOP_TOKENS_PER_POSITION} per position"
            )
        ids.append(_token_id(position.token, f"tokens[{index}].token", facts))
        for rank, top in enumerate(position.top_tokens):
            _token_id(top, f"tokens[{index}].top_tokens[{rank}]", facts)
    return ids


def _token_id(value: str | int, where: str, facts: ModelFacts) -> int:
    if isinstance(value, str):
        if not (value.isascii() and value.isdigit()):
            raise _enforced_refusal(f"{where}: {value[:32]!r} is not a decimal token id")
        value = int(value)
    if not 0 <= value <= facts.max_token_id:
        raise _enforced_refusal(f"{where}: token id {value} is outside the vocabulary (ids 0..{facts.max_token_id})")
    return value


def _enforced_refusal(message: str) -> HttpError:
    return HttpError(400, "BadRequestError", f"{ENFORCED_TOKENS}.{message}", ENFORCED_TOKENS)


def _content_text(message: ChatMessage) -> str:
    if message.content is None:
        return ""
    if isinstance(message.content, str):
        return message.content
    # vLLM joins a message's text parts with newlines.
    return "\n".join(part.text or "" for part in message.content if part.type == "text")


def _non_negative(value: int, field: str) -> int:
    if value < 0:
        raise HttpError(400, "BadRequestError", f"{field}: must be >= 0", field)
    return value
