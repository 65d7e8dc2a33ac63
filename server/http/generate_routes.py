"""`POST pow/generate` and `GET pow/generate/{request_id}` (spec section 1.2): a body is checked whole before it is
queued (the shared checks' refusals, the nonce-set rule, the queue's bound), answered `queued` at once, and run by
the generate queue (server.http.generate_queue) as server.http.generate_jobs says."""

from __future__ import annotations

import functools
import logging
import uuid
from collections.abc import Callable

from fastapi import APIRouter, Depends

from server.http.errors import HttpError
from server.http.generate_jobs import GeneratedSink, JobEngine, run_computation, run_validation
from server.http.generate_queue import FINISHED_KEPT_SECONDS, GenerateJob, GenerateQueue
from server.http.json_body import json_body
from server.http.node_state import NodeState
from server.http.options import FraudThreshold
from server.http.pow_models import GenerateBody, GenerateJobError, GenerateJobResponse, GenerateQueued
from server.http.pow_requests import compute_request, new_request_id, validation_request
from server.poc.batches.round_params import callback_url_of, require_poc_enabled
from server.poc.delivery.callback_stream import CallbackSink, poc_batches_path
from server.poc.delivery.callbacks import CallbackIdentity, StreamedArtifacts
from server.poc.gate.admission import Admission
from server.poc.validation.artifact_compute import compute_plan
from server.poc.validation.artifact_validation import poc_validation_plan

log = logging.getLogger(__name__)


def generate_router(
    node: NodeState,
    jobs: GenerateQueue,
    engine: JobEngine,
    admission: Admission,
    port: int,
    threshold: FraudThreshold,
    stream: CallbackSink | None = None,
) -> APIRouter:
    """`stream`: the pull stream's sink, for jobs without `url`; None where the stream is not served."""
    router = APIRouter(prefix="/api/v1/inference/pow")

    @router.post("/generate")
    async def generate(body: GenerateBody = Depends(json_body(GenerateBody))) -> GenerateQueued:  # noqa: B008
        require_poc_enabled(engine.limits)
        admission.require_open()
        request_id = new_request_id(port)
        # The API node names the model as it loaded it; the shared checks know the served name.
        model = node.served.name if node.served.is_named_by(body.params.model) else body.params.model
        if body.validation is not None:
            validation = validation_request(body, request_id, threshold)
            validation.params.model = model
            poc_validation_plan(validation, engine.limits)
            unaddressed = None
            if stream is not None:
                validated_path = poc_batches_path(body.params.model, "validated")
                unaddressed = functools.partial(stream.post, validated_path)
            job = jobs.submit(
                request_id, len(body.nonces), functools.partial(run_validation, validation, engine, unaddressed)
            )
        else:
            computation = compute_request(body)
            computation.params.model = model
            compute_plan(computation, engine.limits)
            url = callback_url_of(body.url)
            identity = CallbackIdentity(body.public_key, body.block_hash, body.block_height, body.node_id)
            job = jobs.submit(
                request_id,
                len(body.nonces),
                functools.partial(
                    run_computation,
                    computation,
                    _artifact_sink(engine, stream, url, body.params.model, identity, request_id),
                    engine,
                ),
            )
        log.info(
            "generate job %s queued: %d nonces, %s (callbacks to %s)",
            job.request_id,
            job.nonces,
            "validation" if body.validation is not None else "artifacts",
            body.url or ("the pull stream" if stream is not None else "nobody"),
        )
        return GenerateQueued(request_id=request_id, queued_count=jobs.nonces_queued)

    @router.get("/generate/{request_id}", response_model_exclude_none=False)
    async def generate_status(request_id: str) -> GenerateJobResponse:
        _require_job_id(request_id)
        job = jobs.job(request_id)
        if job is None:
            raise HttpError(
                404,
                "JOB_NOT_FOUND",
                f"no generate job {request_id} is queued, running, or finished within the last {FINISHED_KEPT_SECONDS:g} s",
                "request_id",
            )
        return _job_response(job)

    return router


def _artifact_sink(
    engine: JobEngine,
    stream: CallbackSink | None,
    url: str,
    model: str,
    identity: CallbackIdentity,
    request_id: str,
) -> Callable[[int], GeneratedSink] | None:
    """A job's artifacts to `{url}/generated` through the durable store; without `url`, to the pull stream where it is
    served; else nowhere (the job's result holds them)."""
    if url:
        return lambda k_dim: engine.generated_callback(url, identity, k_dim, request_id)
    if stream is not None:
        return lambda k_dim: StreamedArtifacts(stream, model, identity, k_dim, request_id)
    return None


def _require_job_id(request_id: str) -> None:
    """`{port}:{uuid}`, as new_request_id makes them (400 otherwise)."""
    port, _, job_uuid = request_id.partition(":")
    try:
        uuid.UUID(job_uuid)
        well_formed = port.isdigit() and 0 < int(port) < 65536
    except ValueError:
        well_formed = False
    if not well_formed:
        raise HttpError(
            400,
            "MALFORMED_REQUEST_ID",
            f"request_id must read PORT:UUID, as pow/generate answers it; got {request_id[:80]!r}",
            "request_id",
        )


def _job_response(job: GenerateJob) -> GenerateJobResponse:
    error = job.error
    return GenerateJobResponse(
        request_id=job.request_id,
        status=job.status.value,
        result=job.result,
        error=None
        if error is None
        else GenerateJobError(type=error.reason_name, message=error.message, param=error.field),
    )
