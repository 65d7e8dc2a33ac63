"""ComputeArtifacts' and ValidatePocArtifacts' batches spread over the instances: every instance works, the answers
keep the list's order, a dead instance's batch is computed on another. Stand-in engines time their forwards so
that later batches finish first (a real engine's timing cannot be set)."""

from __future__ import annotations

import asyncio

import pytest

from engine_ext.engine_calls import EngineCalls
from engine_ext.generation.errors import EngineDead
from engine_ext.poc.batch import BATCH_OK, PocBatch, PocBatchResult
from server.core.instances import EngineInstance
from server.poc.batches.batch_runner import KvBlockNotes, PocBatchRunner
from server.poc.batches.round_params import ArtifactParams
from server.poc.batches.spread import spread_batches

PARAMS = ArtifactParams("bh", "pk", seq_len=4, k_dim=2, stronger_rng=False)


class TimedEngine:
    def __init__(self, seconds: float, dies_at: int | None = None) -> None:
        self.seconds = seconds
        self.dies_at = dies_at
        self.batches: list[tuple[int, ...]] = []
        self.errored = False
        self.calls = EngineCalls(30, 120)

    async def poc_forward(self, batch: PocBatch) -> PocBatchResult:
        await asyncio.sleep(self.seconds)
        if self.dies_at is not None and len(self.batches) + 1 >= self.dies_at:
            self.errored = True
            raise EngineDead("the engine has died")
        self.batches.append(batch.nonces)
        return PocBatchResult(BATCH_OK, vectors=bytes(4 * len(batch.nonces)))


def instances(*engines: TimedEngine) -> list[EngineInstance]:
    return [EngineInstance(index, engine, PocBatchRunner(engine), alone=False) for index, engine in enumerate(engines)]


def answers(pool: list[EngineInstance], batches: list[list[int]]) -> list[tuple[int, list[int]]]:
    async def read():
        return [
            (instance.index, nonces)
            async for instance, pieces in spread_batches(pool, PARAMS, batches, KvBlockNotes())
            for nonces, _ in pieces
        ]

    return asyncio.run(read())


BATCHES = [[n, n + 1] for n in range(0, 24, 2)]


def test_batches_run_on_every_instance_and_come_back_in_the_lists_order() -> None:
    slow, fast = TimedEngine(0.03), TimedEngine(0.005)
    got = answers(instances(slow, fast), BATCHES)
    assert [nonces for _, nonces in got] == BATCHES
    assert slow.batches and fast.batches and len(fast.batches) > len(slow.batches)
    assert {index for index, _ in got} == {0, 1}


def test_a_batch_whose_instance_dies_is_computed_on_another() -> None:
    dying, steady = TimedEngine(0.005, dies_at=3), TimedEngine(0.01)
    got = answers(instances(dying, steady), BATCHES)
    assert [nonces for _, nonces in got] == BATCHES
    assert len(dying.batches) == 2 and len(steady.batches) == len(BATCHES) - 2


def test_the_call_fails_with_the_death_once_no_instance_is_left() -> None:
    with pytest.raises(EngineDead):
        answers(instances(TimedEngine(0.001, dies_at=2), TimedEngine(0.001, dies_at=3)), BATCHES)


def test_one_instance_runs_the_batches_one_after_the_other() -> None:
    engine = TimedEngine(0.001)
    assert (
        [nonces for _, nonces in answers(instances(engine), BATCHES)]
        == BATCHES
        == [list(batch) for batch in engine.batches]
    )
