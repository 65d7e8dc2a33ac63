"""The inference port's request bodies: the fields of vLLM's OpenAI server that this server serves, with vLLM's
names and defaults, plus the network's (`enforced_tokens`, `logprobs_mode`, spec sections 2 and 3).

Fields this server does not act on (tools, `user`, `logit_bias`, ...) are accepted and ignored, as vLLM ignores
fields it does not know: a servable request must not be refused (validators judge a 4xx on it invalid).
"""

from __future__ import annotations

from typing import Any, Literal

import pydantic

from engine_ext.consensus.logprobs_mode import LogprobsMode

# vLLM's bound on the numeric fields it takes as int64 (a wider one fails its sampling parameters).
INT64_MAX = 2**63 - 1


class OpenAIBody(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="ignore")


class EnforcedPosition(OpenAIBody):
    """One replayed position: the executor's token and its top list, as decimal token-id strings (spec section 2).
    Read as strings here and checked as ids by the translation, so that every fault in them is one 400 naming
    `enforced_tokens` (spec section 4)."""

    token: str | int
    top_tokens: list[str | int] = []


class EnforcedTokens(OpenAIBody):
    tokens: list[EnforcedPosition]


class StreamOptions(OpenAIBody):
    include_usage: bool | None = None
    continuous_usage_stats: bool | None = None


class ResponseFormat(OpenAIBody):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: dict[str, Any] | None = None


class SamplingFields(OpenAIBody):
    """The sampling fields both endpoints share (vLLM's names; None: the engine's default)."""

    model: str | None = None
    max_tokens: int | None = pydantic.Field(default=None, ge=1)
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    seed: int | None = pydantic.Field(default=None, ge=-(2**63), le=INT64_MAX)
    n: int = 1
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    min_tokens: int = 0
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    stream: bool = False
    stream_options: StreamOptions | None = None
    response_format: ResponseFormat | None = None
    return_token_ids: bool = False
    # The network's fields.
    logprobs_mode: LogprobsMode | None = None
    enforced_tokens: EnforcedTokens | None = None


class TextPart(OpenAIBody):
    type: str
    text: str | None = None


class ChatMessage(OpenAIBody):
    role: str
    content: str | list[TextPart] | None = None


class ChatCompletionBody(SamplingFields):
    messages: list[ChatMessage]
    logprobs: bool = False
    top_logprobs: int | None = None
    max_completion_tokens: int | None = pydantic.Field(default=None, ge=1)
    add_generation_prompt: bool = True
    chat_template_kwargs: dict[str, Any] | None = None


class CompletionBody(SamplingFields):
    prompt: str | list[int] | list[str] | list[list[int]]
    # vLLM's completions default (the chat endpoint's is the rest of the context).
    max_tokens: int | None = pydantic.Field(default=16, ge=1)
    logprobs: int | None = pydantic.Field(default=None, ge=0)
    echo: bool = False


class TokenizeBody(OpenAIBody):
    """Either form of vLLM's /tokenize: a prompt, or chat messages rendered by the served template."""

    model: str | None = None
    prompt: str | None = None
    messages: list[ChatMessage] | None = None
    add_generation_prompt: bool = True
    chat_template_kwargs: dict[str, Any] | None = None
