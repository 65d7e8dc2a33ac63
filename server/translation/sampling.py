"""The request's sampling and logprob options, validated (unset fields: the engine's defaults, but
max_tokens, which defaults to the rest of the context as the contract says)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import grpc

from engine_ext.model_facts import ModelFacts
from gonka.mlnode.v1 import inference_pb2 as pb
from server.core.errors import Reason, ServiceError, invalid_field
from server.translation.prompt import require_in_vocabulary

# More outputs than this per prompt is a mistake, not a workload: each is a full engine request.
MAX_OUTPUTS_PER_REQUEST = 128


@dataclass(frozen=True)
class LogprobCounts:
    """Top alternatives per generated / prompt position; None when not asked for."""

    generated: int | None
    prompt: int | None


def logprob_counts(request: pb.GenerateRequest, facts: ModelFacts, top_logprobs: int | None = None) -> LogprobCounts:
    """The request's counts; `top_logprobs` (a replay's k) takes the place of its generated one."""
    if top_logprobs is None and not request.HasField("logprobs"):
        return LogprobCounts(None, None)
    options = request.logprobs
    limit = facts.max_logprobs
    if top_logprobs is not None:
        generated: int | None = top_logprobs
    else:
        generated = options.top_logprobs if options.HasField("top_logprobs") else None
    _require(generated is None or generated <= limit, "logprobs.top_logprobs", f"must be in 0..{limit}")
    prompt = options.prompt_logprobs if options.HasField("prompt_logprobs") else None
    _require(prompt is None or prompt <= limit, "logprobs.prompt_logprobs", f"must be in 0..{limit}")
    return LogprobCounts(generated, prompt)


@dataclass(frozen=True)
class SamplingChoice:
    """The request's sampling options, validated: what the engine gets."""

    options: dict[str, Any]
    stop: tuple[str, ...]
    stop_token_ids: tuple[int, ...]


def sampling_choice(request: pb.GenerateRequest, prompt_length: int, facts: ModelFacts) -> SamplingChoice:
    options = request.sampling
    kwargs: dict[str, Any] = {}

    def optional(name: str, valid: bool, expectation: str) -> None:
        if options.HasField(name):
            _require(valid, f"sampling.{name}", expectation)
            kwargs[name] = getattr(options, name)

    optional("temperature", math.isfinite(options.temperature) and options.temperature >= 0, "must be >= 0")
    optional("top_p", math.isfinite(options.top_p) and 0 < options.top_p <= 1, "must be in (0, 1]")
    optional("top_k", options.top_k >= -1, "must be >= 1, or 0 / -1 for no limit")
    optional("min_p", math.isfinite(options.min_p) and 0 <= options.min_p <= 1, "must be in [0, 1]")
    optional(
        "presence_penalty",
        math.isfinite(options.presence_penalty) and -2 <= options.presence_penalty <= 2,
        "must be in [-2, 2]",
    )
    optional(
        "frequency_penalty",
        math.isfinite(options.frequency_penalty) and -2 <= options.frequency_penalty <= 2,
        "must be in [-2, 2]",
    )
    optional(
        "repetition_penalty",
        math.isfinite(options.repetition_penalty) and options.repetition_penalty > 0,
        "must be > 0",
    )
    optional("seed", True, "")
    optional("max_tokens", options.max_tokens >= 1, "must be >= 1")
    optional("min_tokens", options.min_tokens >= 0, "must be >= 0")
    optional("n", 1 <= options.n <= MAX_OUTPUTS_PER_REQUEST, f"must be in 1..{MAX_OUTPUTS_PER_REQUEST}")
    optional("ignore_eos", True, "")
    optional("skip_special_tokens", True, "")
    optional("include_stop_str_in_output", True, "")
    if options.HasField("max_tokens") and options.HasField("min_tokens"):
        _require(options.min_tokens <= options.max_tokens, "sampling.min_tokens", "must not exceed max_tokens")

    room = facts.max_model_len - prompt_length
    if options.HasField("max_tokens") and options.max_tokens > room:
        raise ServiceError(
            grpc.StatusCode.INVALID_ARGUMENT,
            Reason.CONTEXT_LENGTH_EXCEEDED,
            f"sampling.max_tokens: {options.max_tokens} tokens do not fit after a {prompt_length}-token prompt "
            f"in the model's {facts.max_model_len}-token context (at most {room})",
            field="sampling.max_tokens",
        )
    # The contract's default (vLLM's own would be 16 tokens): up to the end of the context.
    kwargs.setdefault("max_tokens", room)
    stop = tuple(options.stop)
    for index, text in enumerate(stop):
        _require(bool(text), f"sampling.stop[{index}]", "must not be empty")
    stop_token_ids = tuple(options.stop_token_ids)
    require_in_vocabulary(list(stop_token_ids), facts, "sampling.stop_token_ids")
    return SamplingChoice(kwargs, stop, stop_token_ids)


def _require(condition: bool, field: str, expectation: str) -> None:
    if not condition:
        raise invalid_field(field, expectation)
