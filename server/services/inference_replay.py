"""One ValidateInference replay on the engine, and whether it may be judged at all.

A verdict is only given on a replay that ran to the record's own end: an end of sequence, stop token
or stop string (finish STOP), or the request's own max_tokens. A replay ended by anything else is no
evidence about the executor: aborted (shutdown, the engine paused, Abort), failed by the engine, or
cut by this node's own context. Those are the item's errors, retryable where retrying may help.
"""

from __future__ import annotations

from contextlib import aclosing
from dataclasses import dataclass

import grpc

from engine_ext.consensus.inference_distance import Position
from engine_ext.generation.chain_lists import chain_top_lists
from engine_ext.generation.errors import EngineError, RequestFailed
from engine_ext.generation.generation_request import GenerationRequest
from engine_ext.generation.outputs import Finish, FinishReason
from server.core.errors import Reason, ServiceError
from server.core.instances import EngineInstance
from server.poc.gate.admission import Admission
from server.translation import GenerationPlan
from server.translation.engine_failures import engine_failure

RECORD_FIELD = "positions.token_ids"


@dataclass(frozen=True)
class Replay:
    # Per position: the token and the replay's chain list (the processed one when both modes ran).
    positions: list[Position]
    # Both modes ran (GenerationRequest.both_logprobs_modes): the raw lists; None otherwise.
    raw_positions: list[Position] | None
    # How the replay's output ended; None when its stream ended without saying.
    finish: Finish | None


async def run_replay(instance: EngineInstance, plan: GenerationPlan, admission: Admission) -> Replay:
    """Runs the (single-output) generation of `plan` on `instance` and collects its chain lists, k = top_logprobs."""
    request = plan.request
    k = request.top_logprobs
    positions: list[Position] = []
    raw_positions: list[Position] | None = [] if request.both_logprobs_modes else None
    finish: Finish | None = None
    try:
        async with aclosing(await instance.engine.generate(request)) as steps:
            async for step in steps:
                for delta in step.outputs:
                    if delta.logprobs is not None and k:
                        positions.extend(
                            zip(delta.token_ids, map(dict, chain_top_lists(delta.token_ids, delta.logprobs, k)))
                        )
                    elif delta.token_ids:
                        positions.extend((token, {}) for token in delta.token_ids)
                    if raw_positions is not None and delta.raw_logprobs is not None and k is not None:
                        raw_positions.extend(
                            zip(delta.token_ids, map(dict, chain_top_lists(delta.token_ids, delta.raw_logprobs, k)))
                        )
                    if delta.finish is not None:
                        finish = delta.finish
    except RequestFailed as error:
        raise replay_incomplete(f"the engine failed the replay: {error}") from error
    except EngineError as error:
        raise engine_failure(error, plan, admission, instance) from error
    return Replay(positions, raw_positions, finish)


def replay_end_error(
    finish: Finish | None, replayed: int, recorded: int, stated_max_tokens: int | None, admission: Admission
) -> ServiceError | None:
    """Why a replay that produced `replayed` tokens for a record of `recorded` cannot be judged, or None
    when it ended at the record's own end (then a length that differs is the executor's)."""
    if finish is None:
        return replay_incomplete("the replay's output ended without a finish")
    if finish.reason is FinishReason.STOP:
        return None
    if finish.reason is FinishReason.LENGTH:
        if replayed == stated_max_tokens or replayed >= recorded:
            return None  # the request's own max_tokens, or the whole record was replayed
        return ServiceError(
            grpc.StatusCode.INVALID_ARGUMENT,
            Reason.CONTEXT_LENGTH_EXCEEDED,
            f"{RECORD_FIELD}: this node's context ended the replay after {replayed} of the record's {recorded} tokens; "
            "this node cannot judge the item",
            field=RECORD_FIELD,
        )
    if finish.reason is FinishReason.ABORT:
        if not admission.is_open:
            return admission.refusal()
        if admission.gate.closed:
            return admission.gate.preemption()
        return replay_incomplete(f"the replay was aborted after {replayed} of the record's {recorded} tokens")
    return replay_incomplete(
        f"the engine failed the replay after {replayed} of the record's {recorded} tokens (finish {finish.reason.value})"
    )


def require_fits_the_context(request: GenerationRequest, recorded: int, max_model_len: int) -> None:
    """The prompt and the record's tokens must fit this node's context, or the replay would stop short."""
    prompt = len(request.prompt_token_ids)
    if prompt + recorded > max_model_len:
        raise ServiceError(
            grpc.StatusCode.INVALID_ARGUMENT,
            Reason.CONTEXT_LENGTH_EXCEEDED,
            f"{RECORD_FIELD}: a {prompt}-token prompt and the record's {recorded} tokens do not fit this node's "
            f"{max_model_len}-token context; this node cannot judge the item",
            field=RECORD_FIELD,
        )


def replay_incomplete(message: str) -> ServiceError:
    return ServiceError(grpc.StatusCode.UNAVAILABLE, Reason.REPLAY_INCOMPLETE, message)
