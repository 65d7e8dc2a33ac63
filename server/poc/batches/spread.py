"""PoC batches of an explicit nonce list (ComputeArtifacts, ValidatePocArtifacts) spread over the engine
instances, answered in the list's order.

Each available instance takes the next batch as soon as its previous one is done (one batch in flight per
instance: its engine core runs them one after the other anyway), on KV blocks borrowed from its own engine
beside its live inference (server.poc.batches.batch_runner). Results come back in the batches' order, whichever
instance finished first. A batch whose instance's engine dies is taken again by another instance; the call
fails with that death only once no instance is left. With one instance this is the batches one after the
other, as before there were instances.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncGenerator, Sequence

from engine_ext.generation.errors import EngineDead
from engine_ext.poc.batch import PocBatchResult
from server.core.instances import EngineInstance
from server.poc.batches.batch_runner import KvBlockNotes
from server.poc.batches.round_params import ArtifactParams

# Batches finished ahead of the one the caller reads next, per instance: bounds the work done for a caller that
# stops reading (a cancelled call), not the speed.
AHEAD_PER_INSTANCE = 2

Pieces = list[tuple[list[int], PocBatchResult]]


class _Spread:
    def __init__(
        self,
        instances: Sequence[EngineInstance],
        params: ArtifactParams,
        batches: Sequence[Sequence[int]],
        notes: KvBlockNotes,
    ) -> None:
        self._params = params
        self._batches = batches
        self._notes = notes
        self._todo = deque(range(len(batches)))
        self._done: dict[int, tuple[EngineInstance, Pieces] | BaseException] = {}
        self._death: EngineDead | None = None
        self._next = 0
        self._window = AHEAD_PER_INSTANCE * len(instances)
        self._changed = asyncio.Event()
        self._instances = instances

    async def _work(self, instance: EngineInstance) -> None:
        try:
            while self._todo:
                if self._todo[0] >= self._next + self._window:
                    await self._changed_once()
                    continue
                index = self._todo.popleft()
                try:
                    pieces = await instance.runner.run(self._params, self._batches[index], self._notes)
                except EngineDead as death:
                    # Another instance takes the batch; this one's engine serves nothing more.
                    self._todo.appendleft(index)
                    self._death = death
                    return
                except Exception as error:  # the call fails at this batch, after those before it
                    self._done[index] = error
                    return
                self._done[index] = (instance, pieces)
                self._changed.set()
        finally:
            self._changed.set()

    async def _changed_once(self) -> None:
        self._changed.clear()
        await self._changed.wait()

    async def results(self) -> AsyncGenerator[tuple[EngineInstance, Pieces], None]:
        workers = [asyncio.create_task(self._work(instance)) for instance in self._instances]
        try:
            for index in range(len(self._batches)):
                while index not in self._done:
                    if all(worker.done() for worker in workers):
                        raise self._death or RuntimeError("no engine instance took the batch")
                    await self._changed_once()
                outcome = self._done.pop(index)
                if isinstance(outcome, BaseException):
                    raise outcome
                self._next = index + 1
                self._changed.set()
                yield outcome
        finally:
            for worker in workers:
                worker.cancel()


def spread_batches(
    instances: Sequence[EngineInstance], params: ArtifactParams, batches: Sequence[Sequence[int]], notes: KvBlockNotes
) -> AsyncGenerator[tuple[EngineInstance, Pieces], None]:
    """Per batch, in order: the instance that ran it and its (nonces, result) pieces (one, unless KV blocks were
    short and it was split). Raises what a batch raised, after every batch before it was yielded."""
    return _Spread(instances, params, batches, notes).results()
