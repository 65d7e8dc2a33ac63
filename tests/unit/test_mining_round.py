"""The round's batch loop and its control, against a stand-in engine for what a real one cannot be
driven into on demand: nonces whose values are non-finite, and exact control over when forwards and the
round's start-up awaits return. (The real engine's rounds are tested end to end in tests/e2e/test_poc_*.py.)"""

from __future__ import annotations

import asyncio
import dataclasses
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2

from engine_ext.consensus import HeadOutcome
from engine_ext.engine_calls import EngineCalls
from engine_ext.generation.errors import EngineDead
from engine_ext.poc.batch import BATCH_OK, BATCH_WITHDRAWN, PocBatch, PocBatchResult
from gonka.mlnode.v1 import poc_pb2
from server.core.errors import ServiceError
from server.core.instances import EngineInstance, EngineInstances
from server.poc.batches.batch_runner import PocBatchRunner
from server.poc.batches.round_params import ArtifactParams, PocLimits, RoundParameters, round_parameters
from server.poc.fanout.artifact_hub import ArtifactHub, BatchEvent, EndEvent, EndReason, RoundNotFound
from server.poc.gate.priority_gate import PriorityGate
from server.poc.round.mining_round import MAX_CONSECUTIVE_REJECTIONS, RoundState
from server.poc.round.round_control import RoundControl

K = 2
PARAMS = RoundParameters(
    artifacts=ArtifactParams("bh", "pk", seq_len=16, k_dim=K, stronger_rng=False),
    block_height=1,
    node_id=0,
    node_count=1,
    group_id=0,
    group_count=1,
    batch_size=4,
    callback_url="",
    model="m",
)
INFERENCE = "gonka.mlnode.v1.InferenceService"
POC = "gonka.mlnode.v1.PocService"


class StandInEngine:
    """Answers PoC batches as scripted: `non_finite_from` on, every nonce is non-finite; `failing` nonces always are.
    A nonce's vector is its value in its first coordinate."""

    def __init__(self, non_finite_from: int | None = None, failing: dict[int, HeadOutcome] | None = None) -> None:
        self.non_finite_from = non_finite_from
        self.failing = failing or {}
        self.batches: list[PocBatch] = []
        self.paused = False
        self.errored = False
        self.calls = EngineCalls(timeout_seconds=30, stuck_after_seconds=120)

    async def poc_forward(self, batch: PocBatch) -> PocBatchResult:
        import os

        import numpy as np

        await asyncio.sleep(0.01)
        self.batches.append(batch)
        if batch.withdrawn_if_exists and os.path.exists(batch.withdrawn_if_exists):
            return PocBatchResult(BATCH_WITHDRAWN)
        outcomes = [self.failing.get(nonce, HeadOutcome.COMPUTED) for nonce in batch.nonces]
        if self.non_finite_from is not None and len(self.batches) > self.non_finite_from:
            outcomes = [HeadOutcome.NON_FINITE_HIDDEN] * len(batch.nonces)
        vectors = np.zeros((len(batch.nonces), K), dtype="<f2")
        vectors[:, 0] = [
            nonce if outcome == HeadOutcome.COMPUTED else 0 for nonce, outcome in zip(batch.nonces, outcomes)
        ]
        return PocBatchResult(
            BATCH_OK,
            vectors=vectors.tobytes(),
            outcomes=[int(o) for o in outcomes],
            forward_seconds=0.005,
            input_wait_seconds=0.001,
            head_seconds=0.002,
        )

    async def pause(self) -> int:
        self.paused = True
        return 3

    def resume(self) -> None:
        self.paused = False


class Health:
    def __init__(self) -> None:
        self.status: dict[str, int] = {}

    async def set(self, service: str, status: int) -> None:
        self.status[service] = status


def instances_of(*engines: StandInEngine) -> EngineInstances:
    return EngineInstances(
        [
            EngineInstance(index, engine, PocBatchRunner(engine), alone=len(engines) == 1)
            for index, engine in enumerate(engines)
        ]
    )


def control_of(
    engine: StandInEngine | EngineInstances, hub: ArtifactHub, gate: PriorityGate, health: Health
) -> RoundControl:
    instances = engine if isinstance(engine, EngineInstances) else instances_of(engine)
    return RoundControl(instances, gate, hub, health, (INFERENCE,), POC, lambda _id, _p: None, lambda: True)


def test_repeated_non_finite_batches_fail_the_round_visibly() -> None:
    async def scenario():
        engine, hub, gate, health = StandInEngine(non_finite_from=5), ArtifactHub(1000, 60), PriorityGate(), Health()
        control = control_of(engine, hub, gate, health)
        mining = await control.start(PARAMS)
        assert gate.closed and engine.paused and health.status[INFERENCE] == health_pb2.HealthCheckResponse.NOT_SERVING
        events = [event async for event in hub.subscribe(mining.round_id)]
        await control.stop(mining.round_id)
        return mining, events, gate, engine, health

    mining, events, gate, engine, health = asyncio.run(scenario())
    assert mining.state is RoundState.FAILED
    assert "consecutive batches had no artifact" in mining.failure
    assert mining.rejected_batches == MAX_CONSECUTIVE_REJECTIONS
    assert mining.nonces_produced == 5 * PARAMS.batch_size
    assert mining.nonces_failed == MAX_CONSECUTIVE_REJECTIONS * PARAMS.batch_size
    # Each failed nonce went out as its own error, in a batch without artifacts.
    failed = [batch for batch in (event.batch for event in events if isinstance(event, BatchEvent)) if not batch.nonces]
    assert [len(batch.failures) for batch in failed] == [PARAMS.batch_size] * MAX_CONSECUTIVE_REJECTIONS
    status = mining.status()
    assert status.failure == mining.failure and status.state == RoundState.FAILED.value
    assert isinstance(events[-1], EndEvent) and events[-1].reason is EndReason.FAILED
    assert not gate.closed and not engine.paused
    assert health.status[INFERENCE] == health_pb2.HealthCheckResponse.SERVING
    assert health.status[POC] == health_pb2.HealthCheckResponse.NOT_SERVING


def test_a_non_finite_nonce_is_its_own_error_and_its_batch_delivers_the_others() -> None:
    """poc-v2-models.md section 5: the deployed node drops such nonces one by one and delivers the rest."""
    failing = {1: HeadOutcome.NON_FINITE_HIDDEN, 6: HeadOutcome.ZERO_VECTOR, 7: HeadOutcome.NON_FINITE_VECTOR}

    async def scenario():
        engine, hub, gate, health = StandInEngine(failing=failing), ArtifactHub(1000, 60), PriorityGate(), Health()
        control = control_of(engine, hub, gate, health)
        mining = await control.start(PARAMS)
        while mining.last_sequence < 3:
            await asyncio.sleep(0.005)
        await control.stop(None)
        return mining, hub

    mining, hub = asyncio.run(scenario())
    assert mining.state is RoundState.STOPPED and mining.rejected_batches == 0
    first, second, third = _batches(hub, mining.round_id)[:3]
    assert first.nonces == (0, 2, 3) and [(f.nonce, f.outcome) for f in first.failures] == [
        (1, HeadOutcome.NON_FINITE_HIDDEN)
    ]
    assert second.nonces == (4, 5) and [f.nonce for f in second.failures] == [6, 7]
    assert third.nonces == (8, 9, 10, 11) and not third.failures
    # Each delivered vector is its own nonce's.
    import numpy as np

    assert np.frombuffer(first.vectors, dtype="<f2").reshape(-1, K)[:, 0].tolist() == [0, 2, 3]
    assert mining.nonces_failed == 3 and mining.status().nonces_failed == 3
    assert (
        mining.nonces_produced
        == mining.status().nonces_produced
        == sum(len(b.nonces) for b in _batches(hub, mining.round_id))
    )


def test_a_stop_withdraws_the_queued_batch_and_keeps_nonces_dense() -> None:
    async def scenario():
        engine, hub, gate, health = StandInEngine(), ArtifactHub(1000, 60), PriorityGate(), Health()
        control = control_of(engine, hub, gate, health)
        mining = await control.start(PARAMS)
        while mining.nonces_produced < 40:
            await asyncio.sleep(0.005)
        await control.stop(None)
        return mining, engine, hub, health

    mining, engine, hub, health = asyncio.run(scenario())
    assert mining.state is RoundState.STOPPED
    produced = [n for batch in _batches(hub, mining.round_id) for n in batch.nonces]
    assert produced == list(range(len(produced)))  # dense, in order, nothing twice
    assert len(engine.batches) * PARAMS.batch_size >= len(produced)
    status = mining.status()
    assert status.nonces_produced == len(produced) and status.last_sequence == len(produced) // PARAMS.batch_size
    assert status.seconds_stop_to_last_forward >= 0 and status.nonces_per_second_round > 0
    assert health.status[POC] == health_pb2.HealthCheckResponse.SERVING
    # The worker's figures as the stand-in reported them for every batch (the log line at the round's end).
    summary = mining.timing_summary()
    assert summary.startswith("per batch: forward 5.0 ms, outside it ")
    assert summary.endswith("of which waiting for inputs 1.00 ms and the head 2.00 ms")


def _batches(hub: ArtifactHub, round_id: str):
    async def read():
        from server.poc.fanout.artifact_hub import BatchEvent

        return [event.batch async for event in hub.subscribe(round_id) if isinstance(event, BatchEvent)]

    return asyncio.run(read())


class StallingEngine(StandInEngine):
    """pause() (aborting the inference in flight) waits until the test lets it return: the round's start-up
    held open at its await, as a real engine holds it for as long as the abort takes."""

    def __init__(self) -> None:
        super().__init__()
        self.pausing = asyncio.Event()
        self.let_pause_return = asyncio.Event()

    async def pause(self) -> int:
        self.pausing.set()
        await self.let_pause_return.wait()
        return await super().pause()


def test_a_stop_inside_start_round_is_honoured_and_finds_the_round() -> None:
    async def scenario():
        engine, hub, gate, health = StallingEngine(), ArtifactHub(1000, 60), PriorityGate(), Health()
        control = control_of(engine, hub, gate, health)
        starting = asyncio.create_task(control.start(PARAMS))
        await engine.pausing.wait()  # StartRound is inside its start-up
        assert control.round(None).state is RoundState.GENERATING
        stopping = asyncio.create_task(control.stop(None))
        await asyncio.sleep(0.05)
        engine.let_pause_return.set()
        started, stopped = await asyncio.wait_for(asyncio.gather(starting, stopping), 5)
        return started, stopped, engine, gate, health

    started, stopped, engine, gate, health = asyncio.run(scenario())
    assert started is stopped and stopped.state is RoundState.STOPPED
    assert engine.batches == []  # stopped before its first forward
    assert not gate.closed and not engine.paused
    assert health.status[INFERENCE] == health_pb2.HealthCheckResponse.SERVING


def test_a_shutdown_inside_start_round_stops_the_round_and_ends_its_subscribers() -> None:
    async def scenario():
        engine, hub, gate, health = StallingEngine(), ArtifactHub(1000, 60), PriorityGate(), Health()
        control = control_of(engine, hub, gate, health)
        starting = asyncio.create_task(control.start(PARAMS))
        await engine.pausing.wait()
        shutting_down = asyncio.create_task(control.shutdown())
        await asyncio.sleep(0.05)
        engine.let_pause_return.set()
        mining, _ = await asyncio.wait_for(asyncio.gather(starting, shutting_down), 5)
        return mining, [event async for event in hub.subscribe(mining.round_id)], gate

    mining, events, gate = asyncio.run(scenario())
    assert mining.state is RoundState.STOPPED and not gate.closed
    assert isinstance(events[-1], EndEvent) and events[-1].reason is EndReason.STOPPED


class SlowForwardEngine(StandInEngine):
    """Forwards that outlast the wait on engine work (the stuck threshold), called through the real EngineCalls as
    MlnodeEngine.poc_forward calls them."""

    FORWARD_SECONDS = 0.4

    def __init__(self) -> None:
        super().__init__()
        self.calls = EngineCalls(timeout_seconds=0.01, stuck_after_seconds=0.05)
        self.in_flight = 0

    async def poc_forward(self, batch: PocBatch) -> PocBatchResult:
        return await self.calls.call("PoC forward", self._forward(batch), self.calls.work_timeout_seconds)

    async def _forward(self, batch: PocBatch) -> PocBatchResult:
        self.in_flight += 1
        try:
            await asyncio.sleep(self.FORWARD_SECONDS)
            return await super().poc_forward(batch)
        finally:
            self.in_flight -= 1


class RecordingGate(PriorityGate):
    """Notes the engine's forwards in flight each time the gate opens."""

    def __init__(self, engine: SlowForwardEngine) -> None:
        super().__init__()
        self._engine = engine
        self.in_flight_at_open: list[int] = []

    def open(self) -> None:
        self.in_flight_at_open.append(self._engine.in_flight)
        super().open()


def test_the_gate_opens_only_after_the_engine_answered_a_forward_the_timeout_gave_up_on() -> None:
    async def scenario():
        engine = SlowForwardEngine()
        hub, gate, health = ArtifactHub(1000, 60), RecordingGate(engine), Health()
        control = control_of(engine, hub, gate, health)
        mining = await control.start(PARAMS)
        while mining.state is RoundState.GENERATING:
            await asyncio.sleep(0.005)
        failed_with_gate_closed = gate.closed and engine.in_flight > 0
        await control.stop(mining.round_id)
        return mining, gate, failed_with_gate_closed

    mining, gate, failed_with_gate_closed = asyncio.run(scenario())
    assert mining.state is RoundState.FAILED and "did not answer PoC forward within 0.05 s" in mining.failure
    assert failed_with_gate_closed
    assert gate.in_flight_at_open == [0]


def test_an_ended_round_is_forgotten_after_the_retention_time_by_status_and_subscriptions_alike() -> None:
    retention = 0.2

    async def scenario():
        engine, hub, gate, health = StandInEngine(), ArtifactHub(1000, retention), PriorityGate(), Health()
        control = control_of(engine, hub, gate, health)
        mining = await control.start(PARAMS)
        await control.stop(mining.round_id)
        ended = time.monotonic()
        assert control.round(mining.round_id) is mining  # within the retention time
        await asyncio.sleep(retention * 1.5)
        assert time.monotonic() - ended >= retention
        with pytest.raises(ServiceError) as status:
            control.round(mining.round_id)
        with pytest.raises(ServiceError) as latest:
            control.round(None)
        with pytest.raises(RoundNotFound):
            hub.subscribe(mining.round_id)
        return status.value, latest.value

    status, latest = asyncio.run(scenario())
    assert (status.code, status.field) == (grpc.StatusCode.NOT_FOUND, "round_id")
    assert latest.code == grpc.StatusCode.NOT_FOUND


class DyingEngine(StandInEngine):
    """Dies (as a real engine's PoC call reports it) at its `dies_at`-th forward."""

    def __init__(self, dies_at: int) -> None:
        super().__init__()
        self.dies_at = dies_at

    async def poc_forward(self, batch: PocBatch) -> PocBatchResult:
        if len(self.batches) + 1 >= self.dies_at:
            self.errored = True
            self.batches.append(batch)
            raise EngineDead("the engine has died")
        return await super().poc_forward(batch)


NODE = dataclasses.replace(PARAMS, node_id=1, node_count=3)


def test_several_instances_mine_one_nonce_group_each_as_the_deployed_node_numbers_them() -> None:
    async def scenario():
        engines = [StandInEngine(), StandInEngine(), StandInEngine()]
        engines[1].errored = True  # not serving at StartRound: it sits the round out
        hub, gate, health = ArtifactHub(100_000, 60), PriorityGate(), Health()
        control = control_of(instances_of(*engines), hub, gate, health)
        mining = await control.start(NODE)
        while mining.nonces_produced < 200:
            await asyncio.sleep(0.005)
        await control.stop(None)
        return mining, engines, hub

    mining, engines, hub = asyncio.run(scenario())
    assert mining.state is RoundState.STOPPED
    assert (mining.params.group_id, mining.params.group_count) == (0, 2)
    assert [(group.group_id, group.instance.index) for group in mining.groups] == [(0, 0), (1, 2)]
    assert engines[1].batches == []
    batches = _batches(hub, mining.round_id)
    stride = 2 * NODE.node_count
    for group_id, instance in ((0, 0), (1, 2)):
        mined = [n for batch in batches if batch.group_id == group_id for n in batch.nonces]
        assert {batch.instance for batch in batches if batch.group_id == group_id} == {instance}
        # node_id + group_id*node_count + x*(n_groups*node_count), x = 0, 1, 2, ... in order.
        assert mined == [NODE.node_id + group_id * NODE.node_count + x * stride for x in range(len(mined))]
    everything = [n for batch in batches for n in batch.nonces]
    assert len(everything) == len(set(everything)) == mining.nonces_produced
    assert [batch.sequence for batch in batches] == list(range(1, len(batches) + 1))
    status = mining.status()
    assert [(group.group_id, group.instance, group.state) for group in status.groups] == [
        (0, 0, RoundState.STOPPED.value),
        (1, 2, RoundState.STOPPED.value),
    ]
    assert sum(group.nonces_produced for group in status.groups) == status.nonces_produced


def test_a_group_whose_engine_dies_ends_alone_and_the_round_fails_once_every_group_has() -> None:
    async def scenario(engines):
        hub, gate, health = ArtifactHub(100_000, 60), PriorityGate(), Health()
        control = control_of(instances_of(*engines), hub, gate, health)
        mining = await control.start(PARAMS)
        while not mining.ended and (
            mining.groups[0].state is RoundState.GENERATING or mining.groups[1].nonces_produced < 100
        ):
            await asyncio.sleep(0.005)
        state_while_one_mines = mining.state
        await control.stop(None)
        return mining, state_while_one_mines, gate, health

    mining, state_while_one_mines, gate, health = asyncio.run(scenario([DyingEngine(dies_at=3), StandInEngine()]))
    assert state_while_one_mines is RoundState.GENERATING
    assert mining.state is RoundState.STOPPED and mining.failure == ""
    dead, alive = mining.groups
    assert dead.state is RoundState.FAILED and dead.failure == "the engine has died"
    assert alive.state is RoundState.STOPPED and alive.nonces_produced >= 100
    assert not gate.closed and health.status[POC] == health_pb2.HealthCheckResponse.SERVING

    mining, _, gate, health = asyncio.run(scenario([DyingEngine(dies_at=2), DyingEngine(dies_at=4)]))
    assert mining.state is RoundState.FAILED
    assert mining.failure == "group 0 (instance 0): the engine has died; group 1 (instance 1): the engine has died"
    assert not gate.closed and health.status[POC] == health_pb2.HealthCheckResponse.NOT_SERVING


def test_a_request_naming_groups_is_refused_when_the_server_numbers_them() -> None:
    limits = PocLimits("m", max_model_len=64, hidden_size=16, max_num_batched_tokens=4096, max_num_seqs=64)
    two = dataclasses.replace(limits, instances=2)
    request = poc_pb2.StartRoundRequest(
        block_hash="bh", public_key="pk", params=poc_pb2.PocParams(model="m", seq_len=16), group_count=2
    )
    assert round_parameters(request, limits).group_count == 2  # one instance: the request's groups, as before
    with pytest.raises(ServiceError) as refused:
        round_parameters(request, two)
    assert (refused.value.code, refused.value.field) == (grpc.StatusCode.INVALID_ARGUMENT, "group_count")
    request = poc_pb2.StartRoundRequest(
        block_hash="bh", public_key="pk", params=poc_pb2.PocParams(model="m", seq_len=16), group_id=1, group_count=2
    )
    with pytest.raises(ServiceError) as refused:
        round_parameters(request, two)
    assert refused.value.field == "group_id"
