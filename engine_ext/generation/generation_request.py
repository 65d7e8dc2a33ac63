"""A generation request in the project's own terms, and its translation to vLLM's SamplingParams.

The server validates the client's fields and builds a GenerationRequest; only this module knows
how vLLM spells them. vLLM's own checks still run (SamplingParams' constructor and the engine's
input processing); what they refuse comes back as RequestRejected.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from vllm.sampling_params import RequestOutputKind, SamplingParams, StructuredOutputsParams

from engine_ext.consensus.logprobs_mode import LogprobsMode
from engine_ext.generation.both_logprobs_modes import both_modes_width
from engine_ext.generation.errors import RequestRejected
from engine_ext.generation.replay_rows import BOTH_LOGPROBS_MODES, LOGPROBS_MODE_ARG, REPLAY_TOKENS_ARG
from engine_ext.generation.request_refusals import REQUEST_REFUSALS

# Sampling options the server passes through by these names (the contract's SamplingOptions).
SAMPLING_OPTION_NAMES = frozenset(
    {
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "presence_penalty",
        "frequency_penalty",
        "repetition_penalty",
        "seed",
        "max_tokens",
        "min_tokens",
        "n",
        "ignore_eos",
        "skip_special_tokens",
        "include_stop_str_in_output",
    }
)


@dataclass(frozen=True)
class Constraint:
    """One structured-output constraint: kind is json_schema, regex, grammar, choice or json_object."""

    kind: str
    value: str | tuple[str, ...] | bool


@dataclass(frozen=True)
class GenerationRequest:
    request_id: str
    prompt_token_ids: list[int]
    # Only the options the client set (names from SAMPLING_OPTION_NAMES); the rest are the engine's defaults.
    sampling: Mapping[str, Any] = field(default_factory=dict)
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    # Top alternatives per generated / prompt position; None: not asked for.
    top_logprobs: int | None = None
    prompt_logprobs: int | None = None
    constraint: Constraint | None = None
    include_text: bool = False
    # One output message at the end instead of a stream.
    final_only: bool = False
    # A replay: position m is forced to enforced_token_ids[m] after sampling (the last one past the end).
    enforced_token_ids: tuple[int, ...] | None = None
    # How logprobs are computed (inference-validation.md 2); None: the engine's default.
    logprobs_mode: LogprobsMode | None = None
    # Both modes' lists in one pass (engine_ext.generation.both_logprobs_modes): each output's `logprobs` are the
    # processed ones, `raw_logprobs` the raw ones; `logprobs_mode` is then ignored. Needs top_logprobs.
    both_logprobs_modes: bool = False


def with_end_of_sequence(enforced: tuple[int, ...], eos_token_id: int) -> list[int]:
    """The enforced tokens, ending with end of sequence so the replay stops where the original did."""
    tokens = list(enforced)
    if not tokens or tokens[-1] != eos_token_id:
        tokens.append(eos_token_id)
    return tokens


def sampling_params(request: GenerationRequest, logprobs_mode: LogprobsMode, eos_token_id: int) -> SamplingParams:
    """vLLM's SamplingParams for `request`, with `logprobs_mode` (resolved by the caller) for its logprobs."""
    unknown = set(request.sampling) - SAMPLING_OPTION_NAMES
    if unknown:
        raise ValueError(f"unknown sampling options {sorted(unknown)}")  # a server bug, not the client's
    extra_args: dict[str, Any] = {}
    logprobs = request.top_logprobs
    if request.both_logprobs_modes:
        if logprobs is None:
            raise ValueError("both logprobs modes need top_logprobs")  # a server bug, not the client's
        logprobs = both_modes_width(logprobs)
        extra_args[LOGPROBS_MODE_ARG] = BOTH_LOGPROBS_MODES
    elif logprobs is not None:
        extra_args[LOGPROBS_MODE_ARG] = logprobs_mode.value
    if request.enforced_token_ids is not None:
        extra_args[REPLAY_TOKENS_ARG] = with_end_of_sequence(request.enforced_token_ids, eos_token_id)
    try:
        return SamplingParams(
            **request.sampling,
            stop=list(request.stop) or None,
            stop_token_ids=list(request.stop_token_ids) or None,
            logprobs=logprobs,
            prompt_logprobs=request.prompt_logprobs,
            flat_logprobs=True,
            structured_outputs=_structured_outputs(request.constraint),
            # Detokenizing costs CPU per token: only when text is wanted or stop strings need it.
            detokenize=request.include_text or bool(request.stop),
            output_kind=RequestOutputKind.FINAL_ONLY if request.final_only else RequestOutputKind.DELTA,
            extra_args=extra_args or None,
        )
    except REQUEST_REFUSALS as error:
        raise RequestRejected(str(error), part="sampling") from error


def _structured_outputs(constraint: Constraint | None) -> StructuredOutputsParams | None:
    if constraint is None:
        return None
    # Each kind's value has its own type (server.translation.structured_output): choices a tuple, the others a string.
    if constraint.kind == "json_schema":
        return StructuredOutputsParams(json=cast(str, constraint.value))
    if constraint.kind == "choice":
        return StructuredOutputsParams(choice=list(cast(tuple[str, ...], constraint.value)))
    if constraint.kind == "json_object":
        return StructuredOutputsParams(json_object=True)
    options: dict[str, Any] = {constraint.kind: constraint.value}  # regex or grammar: vLLM's field of that name
    return StructuredOutputsParams(**options)
