"""`pow/init/generate`, `pow/status` and `pow/stop` (spec section 1.1): mining rounds over HTTP, started, read and
stopped through the round control PocService drives, after the same checks (server.poc.batches.round_params). A round's
artifacts go to `{url}/generated` through the durable callback store and its sender, in the deployed body, as for a
StartRound with a callback_url; without `url` (or with an empty one), to the pull stream's sink
(server.poc.delivery.callback_stream), where it is served. One "backend" per engine instance, each named by the management
port. pow/stop also cancels the generate jobs (server.http.generate_queue)."""

from __future__ import annotations

import logging

from fastapi import APIRouter, Depends

from server.core.instances import EngineInstances
from server.http.generate_queue import GenerateQueue
from server.http.json_body import json_body
from server.http.node_state import NodeState
from server.http.pow_models import (
    BackendError,
    BackendResult,
    BackendStatus,
    InitGenerateBody,
    InitGenerateResponse,
    PowStatusResponse,
    PowStopResponse,
)
from server.http.pow_requests import start_round_request
from server.poc.batches.round_params import PocLimits, require_poc_enabled, round_parameters
from server.poc.delivery.callback_stream import CallbackSink
from server.poc.delivery.callbacks import streamed_round
from server.poc.gate.admission import Admission
from server.poc.round.round_control import RoundControl

log = logging.getLogger(__name__)

# The deployed backend's refusal while it mines; the API node re-sends init/generate and expects a 200.
ALREADY_GENERATING = "Already generating"
NO_BACKENDS_TO_STOP = "No backends to stop"


def pow_router(
    node: NodeState,
    control: RoundControl,
    limits: PocLimits,
    admission: Admission,
    instances: EngineInstances,
    port: int,
    jobs: GenerateQueue,
    stream: CallbackSink | None = None,
) -> APIRouter:
    """`stream`: the pull stream's sink, for rounds without `url`; None where the stream is not served (such a round's
    artifacts then reach gRPC subscribers alone)."""
    router = APIRouter(prefix="/api/v1/inference/pow")

    @router.post("/init/generate", response_model=InitGenerateResponse, response_model_exclude_none=False)
    async def init_generate(body: InitGenerateBody = Depends(json_body(InitGenerateBody))) -> InitGenerateResponse:  # noqa: B008
        require_poc_enabled(limits)
        admission.require_open()
        request = start_round_request(body)
        # The API node names the model as it loaded it (its repository id, the engine's path here); the deployed
        # backend accepts the served path or name, and the round checks know the served name alone.
        if node.served.is_named_by(request.params.model):
            request.params.model = node.served.name
        params = round_parameters(request, limits)
        running = control.running
        if running is not None:
            # As the deployed node answers a re-sent init/generate: 200, each backend that mines in errors.
            errors = [BackendError(port=port, error=ALREADY_GENERATING) for _ in running.groups]
            return InitGenerateResponse(
                status="OK",
                backends=len(running.groups),
                n_groups=running.params.group_count,
                results=[],
                errors=errors,
            )
        # The callback path names the model as the API node sent it (its own callback URL would carry that name).
        streamed = streamed_round(stream, body.params.model) if not body.url and stream is not None else None
        mining = await control.start(params, streamed)
        log.info(
            "round %s started by pow/init/generate (callbacks to %s)",
            mining.round_id,
            body.url or ("the pull stream" if streamed else "nobody"),
        )
        return InitGenerateResponse(
            status="OK",
            backends=len(mining.groups),
            n_groups=mining.params.group_count,
            results=[BackendResult(port=port, status="OK") for _ in mining.groups],
            errors=None,
        )

    @router.get("/status")
    async def status() -> PowStatusResponse:
        poc_status = node.poc_status.value
        return PowStatusResponse(
            status=poc_status,
            backends=[
                BackendStatus(port=port, instance=instance.index, status=poc_status) for instance in instances.living()
            ],
        )

    # The API node sends `{}`; any body is ignored.
    @router.post("/stop", response_model=PowStopResponse, response_model_exclude_none=True)
    async def stop() -> PowStopResponse:
        living = instances.living()
        # As deployed, pow/stop clears the generate queue too (the API node calls it as validation starts).
        await jobs.cancel_all()
        await node.stop_poc()
        if not living:
            return PowStopResponse(message=NO_BACKENDS_TO_STOP)
        return PowStopResponse(results=[BackendResult(port=port, status="stopped") for _ in living])

    return router
