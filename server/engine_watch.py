"""Watches the engine for the two ways it can stop serving: death (the process goes down) and a
stuck call (health turns NOT_SERVING until the engine answers again)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from grpc_health.v1 import health_pb2

from engine_ext.engine import MlnodeEngine
from server.admission import Admission
from server.health import HealthService
from server.shutdown import ShutdownTrigger

log = logging.getLogger(__name__)
WATCH_INTERVAL_SECONDS = 0.5


async def watch_engine(
    engine: MlnodeEngine,
    trigger: ShutdownTrigger,
    health: HealthService,
    services: Sequence[str],
    admission: Admission,
    gated_services: Sequence[str] = (),
) -> None:
    """`gated_services` stay NOT_SERVING while the priority gate is closed (a mining round runs),
    whatever the engine does."""
    stuck = False
    while not engine.errored:
        await asyncio.sleep(WATCH_INTERVAL_SECONDS)
        problem = engine.calls.problem()
        if (problem is not None) == stuck or not admission.is_open:
            continue
        stuck = problem is not None
        if stuck:
            log.error("%s; health reports NOT_SERVING until it answers", problem)
        else:
            log.warning("the engine answers again; health reports SERVING")
        status = health_pb2.HealthCheckResponse.NOT_SERVING if stuck else health_pb2.HealthCheckResponse.SERVING
        for service in services:
            held = admission.gate.closed and service in gated_services
            await health.set(service, health_pb2.HealthCheckResponse.NOT_SERVING if held else status)
    log.error("the engine died; going down")
    trigger.request("engine died", exit_code=1)
