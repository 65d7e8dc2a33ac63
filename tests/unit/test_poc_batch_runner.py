"""PocBatchRunner when KV blocks are short: it waits a bounded time, then splits the batch, and says so.

The engine is a stand-in here: a real engine's free-block count cannot be held at an exact level
while a test watches (live requests free and take blocks every step)."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from engine_ext.poc.batch import BATCH_INSUFFICIENT_BLOCKS, BATCH_OK, PocBatch, PocBatchResult
from server.core.errors import ServiceError
from server.poc.batches.batch_runner import KvBlockNotes, PocBatchRunner
from server.poc.batches.round_params import ArtifactParams

PARAMS = ArtifactParams("bh", "pk", seq_len=128, k_dim=2, stronger_rng=False)


class BlockLimitedEngine:
    """Runs batches of at most `fits` nonces; frees enough blocks for `after_polls` more after that many polls."""

    def __init__(self, fits: int, grows_to: int | None = None, after_polls: int = 0) -> None:
        self.fits = fits
        self.grows_to = grows_to
        self.after_polls = after_polls
        self.calls: list[tuple[int, ...]] = []

    async def poc_forward(self, batch: PocBatch) -> PocBatchResult:
        self.calls.append(batch.nonces)
        if self.grows_to is not None and len(self.calls) > self.after_polls:
            self.fits = self.grows_to
        if len(batch.nonces) > self.fits:
            return PocBatchResult(BATCH_INSUFFICIENT_BLOCKS, free_blocks=self.fits, needed_blocks=len(batch.nonces))
        vectors = b"".join(bytes([n % 256, 0]) * PARAMS.k_dim for n in batch.nonces)
        return PocBatchResult(BATCH_OK, vectors=vectors)


def run(
    engine: BlockLimitedEngine, nonces: list[int], wait: float
) -> tuple[list[tuple[list[int], PocBatchResult]], KvBlockNotes]:
    notes = KvBlockNotes()
    pieces = asyncio.run(PocBatchRunner(engine, block_wait_seconds=wait).run(PARAMS, nonces, notes))
    return pieces, notes


def test_a_batch_that_fits_runs_once_and_notes_nothing() -> None:
    pieces, notes = run(BlockLimitedEngine(fits=8), list(range(8)), wait=0.5)
    assert [nonces for nonces, _ in pieces] == [list(range(8))]
    assert notes.describe() == ""


def test_blocks_freed_while_waiting_run_the_whole_batch() -> None:
    engine = BlockLimitedEngine(fits=2, grows_to=8, after_polls=3)
    pieces, notes = run(engine, list(range(8)), wait=5.0)
    assert [nonces for nonces, _ in pieces] == [list(range(8))]
    assert notes.waits == 1 and notes.splits == 0


def test_after_the_wait_the_batch_is_split_in_order_down_to_what_fits() -> None:
    pieces, notes = run(BlockLimitedEngine(fits=3), list(range(8)), wait=0.05)
    assert [n for nonces, _ in pieces for n in nonces] == list(range(8))
    assert all(len(nonces) <= 3 for nonces, _ in pieces)
    assert all(result.status == BATCH_OK for _, result in pieces)
    assert notes.splits >= 2 and notes.smallest_batch == 2
    assert "split" in notes.describe()


def test_not_even_one_nonce_fits_is_resource_exhausted() -> None:
    with pytest.raises(ServiceError) as caught:
        run(BlockLimitedEngine(fits=0), [1, 2], wait=0.05)
    assert caught.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert caught.value.reason_name == "KV_BLOCKS_EXHAUSTED"
    assert caught.value.retry_after_seconds == 0.05
