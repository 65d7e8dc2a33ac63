"""`/health`, `/livez`, `/readyz` and `/api/v1/clock`: what the API node and an orchestrator probe.

`/health` and `/livez` answer 503 once no engine instance serves (every one dead, or stuck in a call past
--engine-stuck-after: a hung engine, not only a dead process); `/readyz` also once the server shuts down. A STOPPED
node is live and ready: its engine is loaded, and `inference/up` is all it needs (the deployed node's readiness
says the same of its STOPPED state)."""

from __future__ import annotations

import time

import pydantic
from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse

from server.core.instances import EngineInstances
from server.http.node_state import NodeState
from server.poc.gate.admission import Admission


class InstanceHealth(pydantic.BaseModel):
    index: int
    state: str


class HealthResponse(pydantic.BaseModel):
    status: str
    state: str
    instances: list[InstanceHealth]


def probe_router(node: NodeState, instances: EngineInstances, admission: Admission) -> APIRouter:
    router = APIRouter()

    @router.get("/health", response_model=HealthResponse)
    @router.get("/livez", response_model=HealthResponse)
    async def health() -> JSONResponse:
        healthy = node.inference_healthy
        body = HealthResponse(
            status="healthy" if healthy else "unhealthy",
            state=node.state,
            instances=[InstanceHealth(index=instance.index, state=instance.state.value) for instance in instances],
        )
        return JSONResponse(body.model_dump(), status_code=200 if healthy else 503)

    @router.get("/readyz")
    async def readiness() -> JSONResponse:
        ready = node.inference_healthy and admission.is_open
        return JSONResponse({"ready": ready}, status_code=200 if ready else 503)

    # The API node's clock probe: round trip and clock offset from the two stamps (unix nanoseconds).
    @router.get("/api/v1/clock", status_code=204)
    async def clock() -> Response:
        received = time.time_ns()
        return Response(
            status_code=204, headers={"X-Server-Recv-Ns": str(received), "X-Server-Send-Ns": str(time.time_ns())}
        )

    return router
