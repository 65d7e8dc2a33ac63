"""Watches every engine instance for the ways it can stop serving: death (its processes go down), a stuck call,
and a hang (no step progress while requests wait on it); a stuck or hung instance is NOT_SERVING until its engine
answers, or steps, again.

Each instance reports under its own health name (server.core.instances.instance_health_name); the services and
the server as a whole ("") stay SERVING while any instance serves. A dead instance stays dead (its
streams ended with UNAVAILABLE ENGINE_DEAD, new work goes to the others); once fewer instances than
--min-instances live, the server goes down with exit code 1 (with one instance: when its engine dies).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from grpc_health.v1 import health_pb2

from server.core.health import HealthService
from server.core.instances import EngineInstances, InstanceState, instance_health_name
from server.core.shutdown import ShutdownTrigger
from server.poc.gate.admission import Admission

log = logging.getLogger(__name__)
WATCH_INTERVAL_SECONDS = 0.5
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


async def watch_instances(
    instances: EngineInstances,
    trigger: ShutdownTrigger,
    health: HealthService,
    services: Sequence[str],
    admission: Admission,
    gated_services: Sequence[str] = (),
) -> None:
    """`gated_services` stay NOT_SERVING while the priority gate is closed (a mining round runs),
    whatever the engines do."""
    states = {instance.index: InstanceState.SERVING for instance in instances}
    any_serving = True
    while True:
        await asyncio.sleep(WATCH_INTERVAL_SECONDS)
        for instance in instances:
            if not instance.engine.errored:
                instance.check_progress()
            state = instance.state
            if state is states[instance.index]:
                continue
            _log_change(instance.name, states[instance.index], state, instance.problem(), instance.alone)
            states[instance.index] = state
            if admission.is_open:
                await health.set(
                    instance_health_name(instance.index), SERVING if state is InstanceState.SERVING else NOT_SERVING
                )
        shortfall = instances.below_minimum()
        if shortfall is not None:
            log.error("%s; going down", shortfall)
            trigger.request(shortfall, exit_code=1)
            return
        serving = any(state is InstanceState.SERVING for state in states.values())
        if serving == any_serving or not admission.is_open:
            continue
        any_serving = serving
        if serving:
            log.warning("an instance serves again; health reports SERVING")
        for service in services:
            held = admission.gate.closed and service in gated_services
            await health.set(service, NOT_SERVING if held or not serving else SERVING)


def _log_change(name: str, before: InstanceState, after: InstanceState, problem: str | None, alone: bool) -> None:
    if after is InstanceState.DEAD:
        if not alone:
            log.error("%s: the engine died; the other instances serve on", name)
    elif after is InstanceState.STUCK:
        log.error("%s: %s; it reports NOT_SERVING until it answers", name, problem)
    elif before is InstanceState.STUCK:
        log.warning("%s: the engine answers again; it reports SERVING", name)
