"""One mining round: the batch loop, its state and its counters (one object, passed explicitly).

Batches are issued two deep: while the engine core runs one batch's call, the next is already queued
behind it (utility calls run in order between engine steps), and each call names the batch after it,
so the workers generate those inputs during the current forward. A stop lets the forwards already
issued finish and publishes their artifacts: a forward in flight is never interrupted, and nothing
produced is lost. A batch goes to the round's sinks (the durable callback store) before the hub publishes it,
so whatever any subscriber has read is on disk already. A round ends only once the engine has answered every
forward it issued, also one the engine-call timeout gave up on (the round fails at that timeout, but the
forward runs on in the engine, and inference must stay out until it is over).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Protocol

from engine_ext.consensus import nonce_batches
from engine_ext.engine import MlnodeEngine
from engine_ext.errors import EngineCallTimeout
from engine_ext.poc.batch import BATCH_INSUFFICIENT_BLOCKS, BATCH_WITHDRAWN, PocBatchResult
from engine_ext.poc.withdrawal import Withdrawal
from gonka.mlnode.v1 import poc_pb2
from server.poc.artifact_hub import ArtifactHub
from server.poc.batch_runner import KvBlockNotes, PocBatchRunner, poc_batch
from server.poc.outcomes import split_outcomes
from server.poc.round_params import RoundParameters

log = logging.getLogger(__name__)

PIPELINE_DEPTH = 2
# Consecutive batches without a single artifact (every nonce non-finite) before the round fails instead of looping.
MAX_CONSECUTIVE_REJECTIONS = 3
RATE_WINDOW_SECONDS = 60.0


class RoundState(enum.Enum):
    GENERATING = poc_pb2.ROUND_STATE_GENERATING
    STOPPING = poc_pb2.ROUND_STATE_STOPPING
    STOPPED = poc_pb2.ROUND_STATE_STOPPED
    FAILED = poc_pb2.ROUND_STATE_FAILED


class ArtifactSink(Protocol):
    def add(self, nonces: Sequence[int], vectors: bytes) -> None:
        """Takes one batch before it is published; returns once it is durable."""


class RoundFailed(RuntimeError):
    pass


class MiningRound:
    def __init__(
        self,
        round_id: str,
        params: RoundParameters,
        engine: MlnodeEngine,
        hub: ArtifactHub,
        runner: PocBatchRunner,
        sinks: list[ArtifactSink],
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.round_id = round_id
        self.params = params
        self.state = RoundState.GENERATING
        self.failure = ""
        self.preempted_streams = 0
        self.kv_notes = KvBlockNotes()
        self._engine = engine
        self._hub = hub
        self._runner = runner
        self._sinks = sinks
        self._clock = clock
        self._requested_at = clock()
        self.started_at_unix = wall_clock()
        self._stop = asyncio.Event()
        self._withdrawal = Withdrawal(round_id)
        self._stop_requested_at: float | None = None
        self._last_forward_returned_at: float | None = None
        # Counters.
        self.nonces_produced = 0
        self.last_sequence = 0
        self.rejected_batches = 0
        self.nonces_failed = 0
        self._consecutive_rejections = 0
        self._batches = 0
        self._forward_seconds = 0.0
        self._input_wait_seconds = 0.0
        self._head_seconds = 0.0
        self._outside_seconds = 0.0
        self._outside_samples = 0
        self._first_batch_at: float | None = None
        self._first_issue_at: float | None = None
        self._last_done_at: float | None = None
        self._recent: deque[tuple[float, int]] = deque()

    def request_stop(self) -> None:
        if self.state is RoundState.GENERATING:
            self.state = RoundState.STOPPING
            self._stop_requested_at = self._clock()
            # The batch queued behind the running forward returns without running.
            self._withdrawal.withdraw()
        self._stop.set()

    def fail_to_start(self, error: BaseException) -> None:
        """The round could not start (before its first forward): it ends FAILED without running."""
        self.state = RoundState.FAILED
        self.failure = f"the round could not start: {str(error) or repr(error)}"
        self._stop.set()

    @property
    def ended(self) -> bool:
        return self.state in (RoundState.STOPPED, RoundState.FAILED)

    async def run(self) -> None:
        """Runs until stopped, failed or out of nonces; never raises (the state says how it ended)."""
        params = self.params
        batches = nonce_batches(
            params.node_id, params.node_count, params.group_id, params.group_count, params.batch_size
        )
        pending: deque[tuple[list[int], asyncio.Future[PocBatchResult]]] = deque()
        upcoming = next(batches, None)
        try:
            while True:
                while not self._stop.is_set() and upcoming is not None and len(pending) < PIPELINE_DEPTH:
                    after = next(batches, None)
                    if self._first_issue_at is None:
                        self._first_issue_at = self._clock()
                    batch = poc_batch(
                        params.artifacts, upcoming, after or (), withdrawn_if_exists=str(self._withdrawal.path)
                    )
                    call = self._engine.poc_forward(batch)
                    pending.append((upcoming, asyncio.ensure_future(call)))
                    upcoming = after
                if not pending:
                    break
                nonces, call = pending[0]
                # shield: a cancelled round still lets the engine's call finish (it cannot be interrupted).
                result = await asyncio.shield(call)
                pending.popleft()
                await self._accept(nonces, result)
            if upcoming is None and not self._stop.is_set():
                log.info("round %s: every int32 nonce of this node is done", self.round_id)
            self._last_forward_returned_at = self._clock()
            self.state = RoundState.STOPPED
        except Exception as error:  # the round fails visibly instead of dying silently
            self.state = RoundState.FAILED
            self.failure = str(error) or repr(error)
            log.error("round %s failed: %s", self.round_id, self.failure)
            self._withdrawal.withdraw()
            await _engine_answered(error)
            await _settle(pending)
            self._last_forward_returned_at = self._clock()
        finally:
            self._withdrawal.remove()

    async def _accept(self, nonces: list[int], result: PocBatchResult) -> None:
        if result.status == BATCH_WITHDRAWN:
            return
        if result.status == BATCH_INSUFFICIENT_BLOCKS:
            for piece_nonces, piece in await self._runner.run(self.params.artifacts, nonces, self.kv_notes):
                self._accept_computed(piece_nonces, piece)
            return
        self._accept_computed(nonces, result)

    def _accept_computed(self, nonces: list[int], result: PocBatchResult) -> None:
        now = self._clock()
        previous_done = self._last_done_at if self._last_done_at is not None else self._first_issue_at
        self._last_done_at = now
        split = split_outcomes(nonces, result, self.params.artifacts.k_dim)
        if split.nonces:
            for sink in self._sinks:
                sink.add(split.nonces, split.vectors)  # on disk before any subscriber can read it
        # A nonce without an artifact goes out as its own error in the batch; the others are published as usual.
        batch = self._hub.publish(self.round_id, split.nonces, split.vectors, split.failures)
        self.last_sequence = batch.sequence
        if split.failures:
            self.nonces_failed += len(split.failures)
            log.warning(
                "round %s: %d of %d nonces of batch %d have no artifact: %s",
                self.round_id,
                len(split.failures),
                len(nonces),
                batch.sequence,
                ", ".join(f"{f.nonce} ({f.outcome.name})" for f in split.failures[:8]),
            )
        if not split.nonces:
            self.rejected_batches += 1
            self._consecutive_rejections += 1
            if self._consecutive_rejections >= MAX_CONSECUTIVE_REJECTIONS:
                raise RoundFailed(
                    f"{self._consecutive_rejections} consecutive batches had no artifact (every nonce non-finite)"
                )
            return
        self._consecutive_rejections = 0
        self.nonces_produced += len(split.nonces)
        self._batches += 1
        self._forward_seconds += result.forward_seconds
        if self._batches > 1 and previous_done is not None:
            # The first batch's interval includes input generation nothing could hide; it is
            # reported as seconds_to_first_batch instead. Its input wait and head are left out with it, so
            # that they stay parts of the time outside the forward they are reported as.
            self._outside_seconds += max(0.0, (now - previous_done) - result.forward_seconds)
            self._input_wait_seconds += result.input_wait_seconds
            self._head_seconds += result.head_seconds
            self._outside_samples += 1
        if self._first_batch_at is None:
            self._first_batch_at = now
        self._recent.append((now, len(split.nonces)))
        while self._recent and now - self._recent[0][0] > RATE_WINDOW_SECONDS:
            self._recent.popleft()

    def timing_summary(self) -> str:
        """Where a batch's time went, for the log: the worker's own figures beside the time outside its forward."""
        if not self._batches:
            return "no batch computed"
        forward = f"per batch: forward {1000 * self._forward_seconds / self._batches:.1f} ms"
        if not self._outside_samples:
            return forward
        per_sample = 1000 / self._outside_samples
        return (
            f"{forward}, outside it {self._outside_seconds * per_sample:.2f} ms, of which waiting for inputs "
            f"{self._input_wait_seconds * per_sample:.2f} ms and the head {self._head_seconds * per_sample:.2f} ms"
        )

    def status(self) -> poc_pb2.RoundStatus:
        status = poc_pb2.RoundStatus(
            round_id=self.round_id,
            state=self.state.value,
            parameters=self.params.to_proto(),
            nonces_produced=self.nonces_produced,
            last_sequence=self.last_sequence,
            rejected_batches=self.rejected_batches,
            nonces_failed=self.nonces_failed,
            started_at_unix=self.started_at_unix,
            failure=self.failure,
            preempted_streams=self.preempted_streams,
            kv_blocks_note=self.kv_notes.describe(),
        )
        if self._batches:
            status.forward_seconds_per_batch = self._forward_seconds / self._batches
        if self._outside_samples:
            status.seconds_outside_forward_per_batch = self._outside_seconds / self._outside_samples
        if self._stop_requested_at is not None and self._last_forward_returned_at is not None:
            status.seconds_stop_to_last_forward = max(0.0, self._last_forward_returned_at - self._stop_requested_at)
        if self._first_batch_at is not None:
            status.seconds_to_first_batch = self._first_batch_at - self._requested_at
        if (
            self._first_issue_at is not None
            and self._last_done_at is not None
            and self._last_done_at > self._first_issue_at
        ):
            end = self._last_done_at
            status.nonces_per_second_round = self.nonces_produced / (end - self._first_issue_at)
            window_start = max(self._first_issue_at, end - RATE_WINDOW_SECONDS)
            recent = sum(count for done, count in self._recent if done > window_start)
            status.nonces_per_second_last_minute = recent / (end - window_start)
        return status


async def _settle(pending: deque[tuple[list[int], asyncio.Future[PocBatchResult]]]) -> None:
    """Waits until the engine has answered every call already issued (the gate stays closed until the last
    forward has returned, in the engine: past the engine-call timeout too)."""
    for _, call in pending:
        try:
            await asyncio.shield(call)
        except Exception as error:  # already failing; the engine's own error was reported
            await _engine_answered(error)


async def _engine_answered(error: BaseException) -> None:
    """For a call the engine-call timeout gave up on: returns once the engine has answered it after all."""
    if isinstance(error, EngineCallTimeout) and error.answered is not None:
        await asyncio.wait({error.answered})
