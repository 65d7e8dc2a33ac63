"""`/api/v1/state`, `/api/v1/versions`, `/api/v1/stop` and `/api/v1/inference/up`: the node's state machine
(server.http.node_state) as the API node drives it."""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import APIRouter, Depends

from server.http.generate_queue import GenerateQueue
from server.http.json_body import json_body
from server.http.management_models import InferenceUpRequest, StateResponse, StatusOk, VersionsResponse
from server.http.node_state import NodeState


@dataclass(frozen=True)
class NodeVersions:
    # What `version` says: a semver the API node compares (--mlnode-version).
    mlnode: str
    # The engine's vLLM, as engine_ext.runtime.component_versions reads it.
    vllm: str
    # Validation recomputes beside live inference, on KV blocks borrowed per batch (docs/poc.md); False when
    # PoC is off on this server.
    poc_validation_inference: bool


def node_router(node: NodeState, versions: NodeVersions, jobs: GenerateQueue) -> APIRouter:
    router = APIRouter(prefix="/api/v1")

    @router.get("/state")
    async def state() -> StateResponse:
        return StateResponse(
            state=node.state,
            version=versions.mlnode,
            poc_validation_inference=versions.poc_validation_inference,
            poc_status=node.poc_status.value,
            inference_healthy=node.inference_healthy,
            loaded_model=node.served.path,
        )

    # The older path too (spec section 1: builds before G PR #1348 ask there).
    @router.get("/versions")
    @router.get("/inference/pow/versions")
    async def versions_of() -> VersionsResponse:
        return VersionsResponse(vllm_version=versions.vllm, poc_validation_inference=versions.poc_validation_inference)

    # The API node sends no body; any body is ignored.
    @router.post("/stop")
    async def stop() -> StatusOk:
        # The deployed stop ends every manager: the generate jobs too.
        await jobs.cancel_all()
        await node.stop()
        return StatusOk()

    @router.post("/inference/up")
    async def inference_up(request: InferenceUpRequest = Depends(json_body(InferenceUpRequest))) -> StatusOk:  # noqa: B008
        await node.inference_up(request.model)
        return StatusOk()

    return router
