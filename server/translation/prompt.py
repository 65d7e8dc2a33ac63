"""The request's input (token ids, text or chat) as prompt token ids, checked against the model.

Cheap checks run first, on the event loop: the input's kind, the character bound, the chat roles
and template variables. Only then is the text tokenized or the template rendered, on the
tokenizer pool's threads.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.json_format import MessageToDict

from engine_ext.model_facts import ModelFacts
from gonka.mlnode.v1 import inference_pb2 as pb
from server.core.errors import Reason, ServiceError, invalid_field
from server.translation.tokenizer_pool import TokenizerPool

CHAT_ROLES: dict[int, str] = {
    pb.CHAT_ROLE_SYSTEM: "system",
    pb.CHAT_ROLE_USER: "user",
    pb.CHAT_ROLE_ASSISTANT: "assistant",
    pb.CHAT_ROLE_TOOL: "tool",
}


@dataclass(frozen=True)
class PromptLimits:
    # Most characters of text, or of chat contents and template values together, before tokenizing.
    max_chars: int
    # Variables of the served chat template a client may set.
    template_variables: frozenset[str]


class PromptReader:
    def __init__(self, facts: ModelFacts, limits: PromptLimits, tokenizers: TokenizerPool) -> None:
        self._facts = facts
        self._limits = limits
        self._tokenizers = tokenizers

    async def prompt_token_ids(self, request: pb.GenerateRequest) -> list[int]:
        kind = request.WhichOneof("input")
        if kind == "token_ids":
            ids = list(request.token_ids.ids)
            if not ids:
                raise invalid_field("token_ids.ids", "must not be empty")
            self._require_fits_the_context(len(ids), kind)
            require_in_vocabulary(ids, self._facts, "token_ids.ids")
            return ids
        if kind == "text":
            if not request.text:
                raise invalid_field("text", "must not be empty")
            self._require_chars(len(request.text), "text")
            encoded = await self._tokenizers.encode(request.text, self._facts.max_model_len)
            if isinstance(encoded, int):  # only a count: more tokens than the context holds, so this raises
                self._require_fits_the_context(encoded, kind)
            else:
                ids = encoded
        elif kind == "chat":
            ids = await self._render_chat(request.chat)
        else:
            raise invalid_field("input", "one of token_ids, text or chat is required")
        self._require_fits_the_context(len(ids), kind)
        require_tokenized_in_vocabulary(ids, self._facts, kind)
        return ids

    async def _render_chat(self, chat: pb.ChatInput) -> list[int]:
        if not self._facts.has_chat_template:
            raise invalid_field(
                "chat", f"model {self._facts.served_model_name} has no chat template; send text or token_ids"
            )
        if not chat.messages:
            raise invalid_field("chat.messages", "must not be empty")
        messages = []
        for index, message in enumerate(chat.messages):
            role = CHAT_ROLES.get(message.role)
            if role is None:
                known = ", ".join(pb.ChatRole.Name(value) for value in CHAT_ROLES)
                raise invalid_field(
                    f"chat.messages[{index}].role", f"unknown role {message.role}; expected one of {known}"
                )
            messages.append({"role": role, "content": message.content})
        variables = self._template_variables(chat)
        chars = sum(len(message.content) for message in chat.messages) + _string_chars(variables)
        self._require_chars(chars, "chat.messages")
        add_generation_prompt = chat.add_generation_prompt if chat.HasField("add_generation_prompt") else True
        try:
            return await self._tokenizers.render_chat(messages, add_generation_prompt, variables)
        except Exception as error:  # a template may raise anything on input it rejects
            raise invalid_field("chat", f"the chat template rejected the messages: {error}") from error

    def _template_variables(self, chat: pb.ChatInput) -> dict[str, Any]:
        if not chat.HasField("template_kwargs"):
            return {}
        variables = {
            name: integral_numbers_as_ints(value) for name, value in MessageToDict(chat.template_kwargs).items()
        }
        allowed = self._limits.template_variables
        for name in sorted(variables):
            if name not in allowed:
                offered = ", ".join(sorted(allowed)) or "none"
                raise invalid_field(
                    f"chat.template_kwargs.{name}",
                    f"the served chat template has no variable {name!r} a client may set (it offers: {offered})",
                )
        return variables

    def _require_chars(self, chars: int, field: str) -> None:
        if chars > self._limits.max_chars:
            raise ServiceError(
                grpc.StatusCode.INVALID_ARGUMENT,
                Reason.PROMPT_TOO_LONG,
                f"{field}: {chars} characters exceed the server's bound of {self._limits.max_chars}",
                field=field,
            )

    def _require_fits_the_context(self, tokens: int, field: str) -> None:
        if tokens >= self._facts.max_model_len:
            raise ServiceError(
                grpc.StatusCode.INVALID_ARGUMENT,
                Reason.CONTEXT_LENGTH_EXCEEDED,
                f"{field}: the prompt has {tokens} tokens; the model's context is {self._facts.max_model_len} tokens "
                "and at least one must remain for the output",
                field=field,
            )


def require_in_vocabulary(ids: list[int], facts: ModelFacts, field: str) -> None:
    if ids and max(ids) > facts.max_token_id:
        index = next(i for i, token in enumerate(ids) if token > facts.max_token_id)
        raise ServiceError(
            grpc.StatusCode.INVALID_ARGUMENT,
            Reason.TOKEN_OUT_OF_VOCABULARY,
            f"{field}[{index}]: token id {ids[index]} is outside the vocabulary (ids 0..{facts.max_token_id})",
            field=f"{field}[{index}]",
        )


def require_tokenized_in_vocabulary(ids: list[int], facts: ModelFacts, field: str) -> None:
    """The tokenizer's ids fit the model's rows only when the two belong together; a served tokenizer larger than the
    model (a shape variant beside the Qwen tokenizer) would otherwise send the engine an id it cannot embed."""
    if ids and max(ids) > facts.max_token_id:
        raise ServiceError(
            grpc.StatusCode.INVALID_ARGUMENT,
            Reason.TOKEN_OUT_OF_VOCABULARY,
            f"{field}: the tokenizer gave token id {max(ids)}, outside the model's vocabulary "
            f"(ids 0..{facts.max_token_id}): the served tokenizer is larger than the model",
            field=field,
        )


def integral_numbers_as_ints(value: Any) -> Any:
    """google.protobuf.Struct has doubles only: 3 arrives as 3.0 and would render as "3.0"."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [integral_numbers_as_ints(item) for item in value]
    if isinstance(value, Mapping):
        return {key: integral_numbers_as_ints(item) for key, item in value.items()}
    return value


def _string_chars(value: Any) -> int:
    if isinstance(value, str):
        return len(value)
    if isinstance(value, list):
        return sum(_string_chars(item) for item in value)
    if isinstance(value, Mapping):
        return sum(len(key) + _string_chars(item) for key, item in value.items())
    return 0
