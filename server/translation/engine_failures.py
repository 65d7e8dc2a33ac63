"""The status a client gets for an exception from the engine wrapper: client errors where the engine's
validation found them, UNAVAILABLE where a retry can help, INTERNAL (logged) for everything else."""

from __future__ import annotations

import logging

import grpc

from engine_ext.generation.errors import EngineCallTimeout, EngineDead, EnginePaused, RequestFailed, RequestRejected
from server.core.errors import Reason, ServiceError, invalid_field
from server.core.instances import ENGINE_DIED, EngineInstance
from server.poc.gate.admission import Admission
from server.translation import GenerationPlan

log = logging.getLogger(__name__)
PAUSED_RETRY_AFTER_SECONDS = 1.0


def engine_failure(
    error: Exception, plan: GenerationPlan | None, admission: Admission, instance: EngineInstance | None = None
) -> ServiceError:
    """`instance`: the engine instance the failed work ran on, where one did."""
    if isinstance(error, ServiceError):
        return error
    if isinstance(error, RequestRejected):
        return _rejection(error, plan)
    if isinstance(error, EngineDead):
        message = ENGINE_DIED if instance is None else instance.died_message()
        return ServiceError(grpc.StatusCode.UNAVAILABLE, Reason.ENGINE_DEAD, message)
    if isinstance(error, EnginePaused):
        if not admission.is_open:
            return admission.refusal()
        if admission.gate.closed:
            # It slipped past the gate interceptor while the round was starting.
            return admission.gate.refusal()
        return ServiceError(
            grpc.StatusCode.UNAVAILABLE,
            Reason.ENGINE_PAUSED,
            "the engine is paused",
            retry_after_seconds=PAUSED_RETRY_AFTER_SECONDS,
        )
    if isinstance(error, EngineCallTimeout):
        return ServiceError(grpc.StatusCode.DEADLINE_EXCEEDED, Reason.ENGINE_CALL_TIMEOUT, str(error))
    if isinstance(error, RequestFailed):
        log.error("the engine failed a request: %s", error, exc_info=error.__cause__)
        return ServiceError(grpc.StatusCode.INTERNAL, Reason.INTERNAL_ERROR, str(error))
    log.error("internal error", exc_info=error)
    return ServiceError(grpc.StatusCode.INTERNAL, Reason.INTERNAL_ERROR, f"internal error: {error!r}")


def _rejection(error: RequestRejected, plan: GenerationPlan | None) -> ServiceError:
    """The engine's own input validation refused the request (the checks before it cover the rest)."""
    if error.part == "constraint" and plan is not None and plan.constraint_field is not None:
        return invalid_field(
            plan.constraint_field, f"the engine rejected the constraint: {error.message}", Reason.INVALID_CONSTRAINT
        )
    if error.part == "sampling":
        return invalid_field("sampling", error.message)
    if error.part == "logprobs_mode":
        return invalid_field("logprobs.mode", error.message)
    return invalid_field("request", f"the engine rejected the request: {error.message}")
