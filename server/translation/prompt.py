"""The request's input (token ids, text or chat) as prompt token ids, checked against the model."""

from __future__ import annotations

from typing import Any

import grpc
from google.protobuf.json_format import MessageToDict

from gonka.mlnode.v1 import inference_pb2 as pb
from server.errors import Reason, ServiceError, invalid_field
from server.model_facts import ModelFacts

CHAT_ROLES: dict[int, str] = {
    pb.CHAT_ROLE_SYSTEM: "system",
    pb.CHAT_ROLE_USER: "user",
    pb.CHAT_ROLE_ASSISTANT: "assistant",
    pb.CHAT_ROLE_TOOL: "tool",
}


def prompt_token_ids(request: pb.GenerateRequest, tokenizer: Any, facts: ModelFacts) -> list[int]:
    kind = request.WhichOneof("input")
    if kind == "token_ids":
        ids = list(request.token_ids.ids)
        if not ids:
            raise invalid_field("token_ids.ids", "must not be empty")
        require_in_vocabulary(ids, facts, "token_ids.ids")
    elif kind == "text":
        if not request.text:
            raise invalid_field("text", "must not be empty")
        ids = tokenizer.encode(request.text)
    elif kind == "chat":
        ids = _render_chat(request.chat, tokenizer, facts)
    else:
        raise invalid_field("input", "one of token_ids, text or chat is required")
    if len(ids) >= facts.max_model_len:
        raise ServiceError(
            grpc.StatusCode.INVALID_ARGUMENT,
            Reason.CONTEXT_LENGTH_EXCEEDED,
            f"{kind}: the prompt has {len(ids)} tokens; the model's context is {facts.max_model_len} tokens "
            "and at least one must remain for the output",
            field=kind,
        )
    return ids


def require_in_vocabulary(ids: list[int], facts: ModelFacts, field: str) -> None:
    if ids and max(ids) > facts.max_token_id:
        index = next(i for i, token in enumerate(ids) if token > facts.max_token_id)
        raise ServiceError(
            grpc.StatusCode.INVALID_ARGUMENT,
            Reason.TOKEN_OUT_OF_VOCABULARY,
            f"{field}[{index}]: token id {ids[index]} is outside the vocabulary (ids 0..{facts.max_token_id})",
            field=f"{field}[{index}]",
        )


def _render_chat(chat: pb.ChatInput, tokenizer: Any, facts: ModelFacts) -> list[int]:
    if not facts.has_chat_template:
        raise invalid_field("chat", f"model {facts.served_model_name} has no chat template; send text or token_ids")
    if not chat.messages:
        raise invalid_field("chat.messages", "must not be empty")
    messages = []
    for index, message in enumerate(chat.messages):
        role = CHAT_ROLES.get(message.role)
        if role is None:
            known = ", ".join(pb.ChatRole.Name(value) for value in CHAT_ROLES)
            raise invalid_field(f"chat.messages[{index}].role", f"unknown role {message.role}; expected one of {known}")
        messages.append({"role": role, "content": message.content})
    template_kwargs = MessageToDict(chat.template_kwargs) if chat.HasField("template_kwargs") else {}
    add_generation_prompt = chat.add_generation_prompt if chat.HasField("add_generation_prompt") else True
    try:
        ids = tokenizer.apply_chat_template(
            messages, add_generation_prompt=add_generation_prompt, tokenize=True, **template_kwargs
        )
    except Exception as error:  # a template may raise anything on input it rejects
        raise invalid_field("chat", f"the chat template rejected the messages: {error}") from error
    return list(ids)
