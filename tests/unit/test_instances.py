"""Routing over the engine instances and their states, against stand-in engines for the states a real engine cannot
be driven into on demand (stuck); a real instance's death is tested end to end (tests/e2e/test_instances.py)."""

from __future__ import annotations

import asyncio
import time

import pytest
from grpc_health.v1 import health_pb2

from engine_ext.engine_calls import EngineCalls
from engine_ext.generation.errors import EngineDead
from engine_ext.hang_watch import HangRule
from engine_ext.step_progress import ProgressSample
from server.core.health import HealthService
from server.core.instances import EngineInstance, EngineInstances, InstanceState, instance_health_name
from server.core.shutdown import ShutdownTrigger
from server.engine_watch import watch_instances
from server.poc.gate.admission import Admission

SERVING, NOT_SERVING = health_pb2.HealthCheckResponse.SERVING, health_pb2.HealthCheckResponse.NOT_SERVING
INFERENCE = "gonka.mlnode.v1.InferenceService"


class StandInEngine:
    def __init__(self) -> None:
        self.errored = False
        self.calls = EngineCalls(timeout_seconds=30, stuck_after_seconds=0.05)

        # What step_progress reports: (output batches, unfinished requests).
        self.progress = (0, 0)

    def step_progress(self) -> ProgressSample:
        return ProgressSample(*self.progress)

    def stick(self) -> None:
        """A call into it that never returns (stuck once it is older than stuck_after_seconds)."""
        self.hang = asyncio.get_running_loop().create_future()
        self.hanging_call = asyncio.ensure_future(self.calls.call("a hanging call", self.hang))


def pool(count: int, min_instances: int = 1) -> EngineInstances:
    return EngineInstances(
        [EngineInstance(index, StandInEngine(), runner=None, alone=count == 1) for index in range(count)], min_instances
    )


def test_inference_goes_to_the_least_loaded_instance_ties_to_the_lowest_index() -> None:
    instances = pool(3)
    with instances.pick() as first, instances.pick() as second, instances.pick() as third:
        assert [first.index, second.index, third.index] == [0, 1, 2]
        with instances.pick() as fourth:
            assert fourth.index == 0 and [instance.requests for instance in instances] == [2, 1, 1]
    with instances.pick() as again:
        assert again.index == 0
    assert [instance.requests for instance in instances] == [0, 0, 0]


def test_dead_and_stuck_instances_get_no_new_work_while_another_serves() -> None:
    async def scenario() -> None:
        instances = pool(3)
        instances[0].engine.errored = True
        instances[1].engine.stick()
        await asyncio.sleep(0.1)
        assert [instance.state for instance in instances] == [
            InstanceState.DEAD,
            InstanceState.STUCK,
            InstanceState.SERVING,
        ]
        with instances.pick() as first, instances.pick() as second:
            assert first.index == second.index == 2
        assert [instance.index for instance in instances.available()] == [2]
        # None serves: the living (stuck) ones are asked all the same, as one engine alone always was.
        instances[2].engine.errored = True
        assert [instance.index for instance in instances.available()] == [1]
        instances[1].engine.errored = True
        with pytest.raises(EngineDead), instances.pick():
            pass

    asyncio.run(scenario())


def test_the_watch_reports_each_instance_and_keeps_the_service_serving_while_one_serves() -> None:
    async def scenario() -> tuple[dict[str, int], ShutdownTrigger, dict[str, int], ShutdownTrigger]:
        health, trigger, admission = HealthService(), ShutdownTrigger(), Admission()
        instances = pool(2, min_instances=1)
        for service in ("", INFERENCE, instance_health_name(0), instance_health_name(1)):
            await health.set(service, SERVING)
        watch = asyncio.create_task(watch_instances(instances, trigger, health, ("", INFERENCE), admission))
        instances[1].engine.errored = True
        await asyncio.sleep(1.2)
        one_dead = dict(health._server_status)
        watch.cancel()
        # A minimum of two: the server goes down once one dies.
        strict, strict_trigger = pool(2, min_instances=2), ShutdownTrigger()
        strict_watch = asyncio.create_task(watch_instances(strict, strict_trigger, health, ("", INFERENCE), admission))
        strict[0].engine.errored = True
        await asyncio.wait_for(strict_trigger.wait(), 5)
        await strict_watch
        return one_dead, trigger, dict(health._server_status), strict_trigger

    one_dead, trigger, _, strict_trigger = asyncio.run(scenario())
    assert one_dead[instance_health_name(1)] == NOT_SERVING and one_dead[instance_health_name(0)] == SERVING
    assert one_dead[""] == SERVING and one_dead[INFERENCE] == SERVING
    assert trigger.reason == ""  # no shutdown while the minimum lives
    assert strict_trigger.exit_code == 1
    assert strict_trigger.reason == "1 of 2 instances have a living engine, fewer than --min-instances 2"


def test_the_watch_turns_a_hung_instance_not_serving_and_back_once_it_steps() -> None:
    async def scenario() -> tuple[InstanceState, int, InstanceState, int]:
        health, trigger, admission = HealthService(), ShutdownTrigger(), Admission()
        instances = EngineInstances(
            [EngineInstance(index, StandInEngine(), None, alone=False, hang_rule=HangRule(0.1, 3)) for index in (0, 1)]
        )
        for service in ("", INFERENCE, instance_health_name(0), instance_health_name(1)):
            await health.set(service, SERVING)
        instances[0].engine.progress = (7, 2)  # requests wait, the count stands still
        watch = asyncio.create_task(watch_instances(instances, trigger, health, ("", INFERENCE), admission))
        await asyncio.sleep(2.8)
        hung = (instances[0].state, health._server_status[instance_health_name(0)])
        instances[0].engine.progress = (8, 2)
        await asyncio.sleep(0.8)
        stepped = (instances[0].state, health._server_status[instance_health_name(0)])
        watch.cancel()
        assert instances[1].state is InstanceState.SERVING
        return (*hung, *stepped)

    assert asyncio.run(scenario()) == (InstanceState.STUCK, NOT_SERVING, InstanceState.SERVING, SERVING)


def test_a_servers_one_engine_dying_takes_it_down_as_before_instances() -> None:
    instances = pool(1)
    assert instances.below_minimum() is None
    instances[0].engine.errored = True
    assert instances.below_minimum() == "the engine died"
    assert instances[0].died_message() == "the engine has died; the server is going down"
    assert (
        pool(2)[1].died_message().startswith("the engine of instance 1 has died; the server's other instances serve on")
    )


def test_the_stuck_state_follows_the_engines_calls() -> None:
    async def scenario() -> list[InstanceState]:
        instances = pool(1)
        engine = instances[0].engine
        engine.stick()
        seen = [instances[0].state]
        started = time.monotonic()
        while instances[0].state is not InstanceState.STUCK and time.monotonic() - started < 2:
            await asyncio.sleep(0.01)
        seen.append(instances[0].state)
        engine.hang.set_result(None)
        await asyncio.sleep(0)
        seen.append(instances[0].state)
        return seen

    assert asyncio.run(scenario()) == [InstanceState.SERVING, InstanceState.STUCK, InstanceState.SERVING]


class PausableEngine(StandInEngine):
    def __init__(self, in_flight: int) -> None:
        super().__init__()
        self.in_flight = in_flight
        self.paused = False

    async def pause(self) -> int:
        self.paused = True
        return self.in_flight

    def resume(self) -> None:
        self.paused = False


def test_a_drain_or_a_rounds_start_pauses_every_living_instance_and_counts_their_streams() -> None:
    engines = [PausableEngine(2), PausableEngine(3), PausableEngine(4)]
    engines[2].errored = True  # a dead engine has nothing to abort
    instances = EngineInstances(
        [EngineInstance(index, engine, runner=None, alone=False) for index, engine in enumerate(engines)]
    )
    assert asyncio.run(instances.pause()) == 5
    assert [engine.paused for engine in engines] == [True, True, False]
    instances.resume()
    assert not any(engine.paused for engine in engines)
