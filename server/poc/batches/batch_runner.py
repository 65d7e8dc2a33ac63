"""Runs PoC batches through the engine when KV blocks may be short: waits a bounded time for enough
free blocks, then splits the batch (down to one nonce). Used by recomputation beside live inference,
where the engine's blocks belong to users first; a mining round's engine has no inference running."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import grpc

from engine_ext.engine import MlnodeEngine
from engine_ext.poc.batch import BATCH_INSUFFICIENT_BLOCKS, PocBatch, PocBatchResult
from server.core.errors import Reason, ServiceError
from server.poc.batches import DEFAULT_BLOCK_WAIT_SECONDS
from server.poc.batches.round_params import ArtifactParams

BLOCK_POLL_SECONDS = 0.05


@dataclass
class KvBlockNotes:
    """What batches had to do about KV blocks, for status."""

    waits: int = 0
    waited_seconds: float = 0.0
    splits: int = 0
    smallest_batch: int = 0

    def describe(self) -> str:
        if not self.waits and not self.splits:
            return ""
        return (
            f"waited for free KV blocks {self.waits} time(s), {self.waited_seconds:.2f} s in all; "
            f"split {self.splits} batch(es), the smallest to {self.smallest_batch} nonce(s)"
        )


def poc_batch(
    params: ArtifactParams, nonces: Sequence[int], next_nonces: Sequence[int] = (), withdrawn_if_exists: str = ""
) -> PocBatch:
    return PocBatch(
        params.block_hash,
        params.public_key,
        tuple(nonces),
        params.seq_len,
        params.k_dim,
        params.stronger_rng,
        tuple(next_nonces),
        withdrawn_if_exists,
    )


class PocBatchRunner:
    def __init__(
        self,
        engine: MlnodeEngine,
        block_wait_seconds: float = DEFAULT_BLOCK_WAIT_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._engine = engine
        self._block_wait_seconds = block_wait_seconds
        self._clock = clock

    async def run(
        self, params: ArtifactParams, nonces: Sequence[int], notes: KvBlockNotes
    ) -> list[tuple[list[int], PocBatchResult]]:
        """(nonces, result) per batch actually run: one, unless blocks were short and it was split."""
        result = await self._run_waiting(params, nonces, notes)
        if result.status != BATCH_INSUFFICIENT_BLOCKS:
            return [(list(nonces), result)]
        if len(nonces) == 1:
            raise ServiceError(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                Reason.KV_BLOCKS_EXHAUSTED,
                f"not enough free KV blocks for one nonce of {params.seq_len} tokens "
                f"({result.needed_blocks} needed, {result.free_blocks} free) after {self._block_wait_seconds:g} s",
                retry_after_seconds=self._block_wait_seconds,
            )
        half = len(nonces) // 2
        notes.splits += 1
        notes.smallest_batch = min(notes.smallest_batch or half, half, len(nonces) - half)
        return await self.run(params, nonces[:half], notes) + await self.run(params, nonces[half:], notes)

    async def _run_waiting(self, params: ArtifactParams, nonces: Sequence[int], notes: KvBlockNotes) -> PocBatchResult:
        started = self._clock()
        result = await self._engine.poc_forward(poc_batch(params, nonces))
        if result.status != BATCH_INSUFFICIENT_BLOCKS:
            return result
        notes.waits += 1
        try:
            while self._clock() - started < self._block_wait_seconds:
                await asyncio.sleep(BLOCK_POLL_SECONDS)
                result = await self._engine.poc_forward(poc_batch(params, nonces))
                if result.status != BATCH_INSUFFICIENT_BLOCKS:
                    return result
            return result
        finally:
            notes.waited_seconds += self._clock() - started
