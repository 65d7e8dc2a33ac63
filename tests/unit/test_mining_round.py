"""The round's batch loop and its control, against a stand-in engine for what a real one cannot be
driven into on demand: nonces whose values are non-finite, and exact control over when forwards and the
round's start-up awaits return. (The real engine's rounds are tested end to end in tests/e2e/test_poc_*.py.)"""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2

from engine_ext.consensus import HeadOutcome
from engine_ext.engine_calls import EngineCalls
from engine_ext.poc.batch import BATCH_OK, BATCH_WITHDRAWN, PocBatch, PocBatchResult
from server.errors import ServiceError
from server.poc.artifact_hub import ArtifactHub, BatchEvent, EndEvent, EndReason, RoundNotFound
from server.poc.batch_runner import PocBatchRunner
from server.poc.mining_round import MAX_CONSECUTIVE_REJECTIONS, RoundState
from server.poc.priority_gate import PriorityGate
from server.poc.round_control import RoundControl
from server.poc.round_params import ArtifactParams, RoundParameters

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


def control_of(engine: StandInEngine, hub: ArtifactHub, gate: PriorityGate, health: Health) -> RoundControl:
    return RoundControl(
        engine, gate, hub, PocBatchRunner(engine), health, (INFERENCE,), POC, lambda _id, _p: None, lambda: True
    )


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
        from server.poc.artifact_hub import BatchEvent

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
    """Forwards that outlast the engine-call timeout, called through the real EngineCalls."""

    FORWARD_SECONDS = 0.4

    def __init__(self) -> None:
        super().__init__()
        self.calls = EngineCalls(timeout_seconds=0.05, stuck_after_seconds=120)
        self.in_flight = 0

    async def poc_forward(self, batch: PocBatch) -> PocBatchResult:
        return await self.calls.call("PoC forward", self._forward(batch))

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
