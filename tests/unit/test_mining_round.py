"""The round's batch loop and its control, against a stand-in engine for what a real one cannot be
driven into on demand: nonces whose values are non-finite, and exact control over when forwards return.
(The real engine's rounds are tested end to end in tests/e2e/test_poc_*.py.)"""

from __future__ import annotations

import asyncio

from grpc_health.v1 import health_pb2

from engine_ext.consensus import HeadOutcome
from engine_ext.poc.batch import BATCH_OK, BATCH_WITHDRAWN, PocBatch, PocBatchResult
from server.poc.artifact_hub import ArtifactHub, BatchEvent, EndEvent, EndReason
from server.poc.batch_runner import PocBatchRunner
from server.poc.mining_round import MAX_CONSECUTIVE_REJECTIONS, RoundState
from server.poc.priority_gate import PriorityGate
from server.poc.round_control import RoundControl
from server.poc.round_params import ArtifactParams, RoundParameters

K = 2
PARAMS = RoundParameters(
    artifacts=ArtifactParams("bh", "pk", seq_len=16, k_dim=K, stronger_rng=False),
    block_height=1, node_id=0, node_count=1, group_id=0, group_count=1, batch_size=4, callback_url="", model="m",
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
        vectors[:, 0] = [nonce if outcome == HeadOutcome.COMPUTED else 0 for nonce, outcome in zip(batch.nonces, outcomes)]
        return PocBatchResult(BATCH_OK, vectors=vectors.tobytes(), outcomes=[int(o) for o in outcomes], forward_seconds=0.005,
                              input_wait_seconds=0.001, head_seconds=0.002)

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
    return RoundControl(engine, gate, hub, PocBatchRunner(engine), health, (INFERENCE,), POC, lambda _id, _p: None, lambda: True)


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
    assert first.nonces == (0, 2, 3) and [(f.nonce, f.outcome) for f in first.failures] == [(1, HeadOutcome.NON_FINITE_HIDDEN)]
    assert second.nonces == (4, 5) and [f.nonce for f in second.failures] == [6, 7]
    assert third.nonces == (8, 9, 10, 11) and not third.failures
    # Each delivered vector is its own nonce's.
    import numpy as np

    assert np.frombuffer(first.vectors, dtype="<f2").reshape(-1, K)[:, 0].tolist() == [0, 2, 3]
    assert mining.nonces_failed == 3 and mining.status().nonces_failed == 3
    assert mining.nonces_produced == mining.status().nonces_produced == sum(len(b.nonces) for b in _batches(hub, mining.round_id))


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
