"""One mining round: a batch loop per nonce group, the round's state and its counters (one object, passed
explicitly).

Each group is one engine instance mining its own nonces (spec section 8: node_id + group_id*node_count +
x*(group_count*node_count), x = 0, 1, 2, ... in order); the groups run side by side and publish into the
round's one sequence of batches, each batch naming its group and instance. A group that fails (its engine
died, or three batches in a row were non-finite) ends alone; the others mine on, and the round fails only
once every group has. In each group, batches are issued two deep: while the engine core runs one batch's call, the next is already queued
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
from dataclasses import dataclass, field
from typing import Protocol

from engine_ext.consensus import nonce_batches
from engine_ext.generation.errors import EngineCallTimeout
from engine_ext.poc.batch import BATCH_INSUFFICIENT_BLOCKS, BATCH_WITHDRAWN, PocBatchResult
from engine_ext.poc.withdrawal import Withdrawal
from gonka.mlnode.v1 import poc_pb2
from server.core.instances import EngineInstance
from server.poc.batches.batch_runner import KvBlockNotes, poc_batch
from server.poc.batches.outcomes import split_outcomes
from server.poc.batches.round_params import RoundParameters
from server.poc.fanout.artifact_hub import ArtifactHub

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


@dataclass(eq=False)
class MiningGroup:
    """One nonce group of a round: the instance that mines it and its share of the round's counters."""

    group_id: int
    instance: EngineInstance
    state: RoundState = RoundState.GENERATING
    failure: str = ""
    nonces_produced: int = 0
    batches: int = 0
    consecutive_rejections: int = 0
    first_issue_at: float | None = None
    last_done_at: float | None = None
    withdrawal: Withdrawal | None = field(default=None, repr=False)

    def status(self) -> poc_pb2.GroupStatus:
        return poc_pb2.GroupStatus(
            group_id=self.group_id,
            instance=self.instance.index,
            state=self.state.value,
            nonces_produced=self.nonces_produced,
            failure=self.failure,
        )


def _withdrawal_of(group: MiningGroup) -> Withdrawal:
    """The group's withdrawal file, which MiningRound gives every group as the round starts."""
    assert group.withdrawal is not None
    return group.withdrawal


class MiningRound:
    def __init__(
        self,
        round_id: str,
        params: RoundParameters,
        groups: Sequence[MiningGroup],
        hub: ArtifactHub,
        sinks: Sequence[ArtifactSink],
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.round_id = round_id
        self.params = params
        self.state = RoundState.GENERATING
        self.failure = ""
        self.preempted_streams = 0
        self.kv_notes = KvBlockNotes()
        self.groups = list(groups)
        self._hub = hub
        self._sinks = sinks
        self._clock = clock
        self._requested_at = clock()
        self.started_at_unix = wall_clock()
        self._stop = asyncio.Event()
        for group in self.groups:
            # One file per group: a group that fails withdraws its own queued batch, not the others'.
            group.withdrawal = Withdrawal(f"{round_id}-group-{group.group_id}")
        self._stop_requested_at: float | None = None
        self._last_forward_returned_at: float | None = None
        # Counters.
        self.nonces_produced = 0
        self.last_sequence = 0
        self.rejected_batches = 0
        self.nonces_failed = 0
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
            # The batch queued behind each group's running forward returns without running.
            for group in self.groups:
                _withdrawal_of(group).withdraw()
        self._stop.set()

    def fail_to_start(self, error: BaseException) -> None:
        """The round could not start (before its first forward): it ends FAILED without running."""
        self.state = RoundState.FAILED
        self.failure = f"the round could not start: {str(error) or repr(error)}"
        for group in self.groups:
            group.state = RoundState.FAILED
            group.failure = self.failure
        self._stop.set()

    @property
    def ended(self) -> bool:
        return self.state in (RoundState.STOPPED, RoundState.FAILED)

    async def run(self) -> None:
        """Runs until stopped, failed or out of nonces; never raises (the state says how it ended)."""
        await asyncio.gather(*(self._mine(group) for group in self.groups))
        self._last_forward_returned_at = self._clock()
        if self.state is not RoundState.FAILED:
            self.state = RoundState.STOPPED

    async def _mine(self, group: MiningGroup) -> None:
        """One group's batch loop, until the round stops, the group fails or its nonces run out."""
        params = self.params
        batches = nonce_batches(
            params.node_id, params.node_count, group.group_id, params.group_count, params.batch_size
        )
        pending: deque[tuple[list[int], asyncio.Future[PocBatchResult]]] = deque()
        upcoming = next(batches, None)
        try:
            while True:
                while not self._stop.is_set() and upcoming is not None and len(pending) < PIPELINE_DEPTH:
                    after = next(batches, None)
                    if group.first_issue_at is None:
                        group.first_issue_at = self._clock()
                        if self._first_issue_at is None:
                            self._first_issue_at = group.first_issue_at
                    batch = poc_batch(
                        params.artifacts, upcoming, after or (), withdrawn_if_exists=str(_withdrawal_of(group).path)
                    )
                    call = group.instance.engine.poc_forward(batch)
                    pending.append((upcoming, asyncio.ensure_future(call)))
                    upcoming = after
                if not pending:
                    break
                nonces, call = pending[0]
                # shield: a cancelled round still lets the engine's call finish (it cannot be interrupted).
                result = await asyncio.shield(call)
                pending.popleft()
                await self._accept(group, nonces, result)
            if upcoming is None and not self._stop.is_set():
                log.info("round %s: every int32 nonce of this node and group %d is done", self.round_id, group.group_id)
            group.state = RoundState.STOPPED
        except Exception as error:  # the group fails visibly instead of dying silently
            group.state = RoundState.FAILED
            group.failure = str(error) or repr(error)
            log.error("round %s failed%s: %s", self.round_id, self._group_words(group), group.failure)
            if all(each.state is RoundState.FAILED for each in self.groups):
                self.state = RoundState.FAILED
                self.failure = self._failures()
            _withdrawal_of(group).withdraw()
            await _engine_answered(error)
            await _settle(pending)
        finally:
            _withdrawal_of(group).remove()

    def _group_words(self, group: MiningGroup) -> str:
        return "" if len(self.groups) == 1 else f" in group {group.group_id} ({group.instance.name})"

    def _failures(self) -> str:
        if len(self.groups) == 1:
            return self.groups[0].failure
        return "; ".join(f"group {group.group_id} ({group.instance.name}): {group.failure}" for group in self.groups)

    async def _accept(self, group: MiningGroup, nonces: list[int], result: PocBatchResult) -> None:
        if result.status == BATCH_WITHDRAWN:
            return
        if result.status == BATCH_INSUFFICIENT_BLOCKS:
            for piece_nonces, piece in await group.instance.runner.run(self.params.artifacts, nonces, self.kv_notes):
                self._accept_computed(group, piece_nonces, piece)
            return
        self._accept_computed(group, nonces, result)

    def _accept_computed(self, group: MiningGroup, nonces: list[int], result: PocBatchResult) -> None:
        now = self._clock()
        # The time outside the forward is the group's own: its engine runs its batches one after the other.
        previous_done = group.last_done_at if group.last_done_at is not None else group.first_issue_at
        group.last_done_at = now
        self._last_done_at = now
        split = split_outcomes(nonces, result, self.params.artifacts.k_dim)
        if split.nonces:
            for sink in self._sinks:
                sink.add(split.nonces, split.vectors)  # on disk before any subscriber can read it
        # A nonce without an artifact goes out as its own error in the batch; the others are published as usual.
        batch = self._hub.publish(
            self.round_id, split.nonces, split.vectors, group.group_id, group.instance.index, split.failures
        )
        self.last_sequence = batch.sequence
        if split.failures:
            self.nonces_failed += len(split.failures)
            log.warning(
                "round %s: %d of %d nonces of batch %d%s have no artifact: %s",
                self.round_id,
                len(split.failures),
                len(nonces),
                batch.sequence,
                self._group_words(group),
                ", ".join(f"{f.nonce} ({f.outcome.name})" for f in split.failures[:8]),
            )
        if not split.nonces:
            self.rejected_batches += 1
            group.consecutive_rejections += 1
            if group.consecutive_rejections >= MAX_CONSECUTIVE_REJECTIONS:
                raise RoundFailed(
                    f"{group.consecutive_rejections} consecutive batches had no artifact (every nonce non-finite)"
                )
            return
        group.consecutive_rejections = 0
        self.nonces_produced += len(split.nonces)
        group.nonces_produced += len(split.nonces)
        group.batches += 1
        self._batches += 1
        self._forward_seconds += result.forward_seconds
        if group.batches > 1 and previous_done is not None:
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
            groups=[group.status() for group in self.groups],
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
