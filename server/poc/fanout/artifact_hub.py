"""Fans each PoC round's artifact batches out to any number of subscribers (the gRPC artifact streams).

Publishing never waits for a subscriber: batches go into the round's bounded buffer and subscribers read
from it at their own pace. One that falls behind the buffer is told exactly which sequences it lost, and
a subscriber that reconnects with the last sequence it saw misses nothing still buffered.

Not thread-safe: call every method from the event loop that runs the subscribers.
"""

from __future__ import annotations

import asyncio
import enum
import time
from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass

from server.core.errors import echoed
from server.poc.batches.artifacts import ArtifactBatch, NonceFailure
from server.poc.fanout.round_buffer import RoundBuffer


class EndReason(enum.Enum):
    STOPPED = "stopped"
    FAILED = "failed"
    SHUTTING_DOWN = "shutting_down"


@dataclass(frozen=True)
class BatchEvent:
    batch: ArtifactBatch


@dataclass(frozen=True)
class LostEvent:
    """Sequences first..last (inclusive) were evicted before this subscriber read them."""

    first_missing_sequence: int
    last_missing_sequence: int
    batches: int
    artifacts: int


@dataclass(frozen=True)
class EndEvent:
    """The round is closed and the subscriber has read (or been told it lost) everything up to last_sequence."""

    reason: EndReason
    detail: str
    last_sequence: int


HubEvent = BatchEvent | LostEvent | EndEvent


class RoundNotFound(LookupError):
    """No such round: never opened, or closed longer ago than the retention time."""


class RoundExists(ValueError):
    """open_round for an id the hub still holds."""


class RoundClosed(RuntimeError):
    """publish to a round that has ended."""


class HubShutDown(RuntimeError):
    """open_round after shutdown: nobody would close the new round."""


@dataclass(frozen=True)
class RoundStats:
    round_id: str
    k_dim: int
    batches_published: int
    artifacts_published: int
    last_sequence: int
    subscribers: int
    buffered_batches: int
    buffered_artifacts: int
    end_reason: EndReason | None
    end_detail: str


class _Round:
    def __init__(self, round_id: str, buffer: RoundBuffer) -> None:
        self.round_id = round_id
        self.buffer = buffer
        self.subscribers = 0
        self.end_reason: EndReason | None = None
        self.end_detail = ""
        self.closed_at: float | None = None
        self._changed = asyncio.Event()

    def changed(self) -> asyncio.Event:
        """An event set at the next publish or close (a fresh one each time, so no waiter misses a change)."""
        return self._changed

    def notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()


class ArtifactHub:
    def __init__(
        self, buffer_artifacts: int, retention_seconds: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if buffer_artifacts < 1:
            raise ValueError(f"buffer_artifacts must be >= 1, got {buffer_artifacts}")
        if retention_seconds < 0:
            raise ValueError(f"retention_seconds must be >= 0, got {retention_seconds}")
        self._buffer_artifacts = buffer_artifacts
        self._retention_seconds = retention_seconds
        self._clock = clock
        self._rounds: dict[str, _Round] = {}
        self._current_id: str | None = None
        self._shut_down = False

    def open_round(self, round_id: str, k_dim: int) -> None:
        """Start a round; it becomes the current one (what subscribe(None) follows)."""
        self.drop_expired()
        if self._shut_down:
            raise HubShutDown(f"cannot open round {echoed(round_id)}: the hub is shut down")
        if round_id in self._rounds:
            raise RoundExists(f"round {echoed(round_id)} already exists")
        self._rounds[round_id] = _Round(round_id, RoundBuffer(k_dim, self._buffer_artifacts))
        self._current_id = round_id

    def publish(
        self,
        round_id: str,
        nonces: Sequence[int],
        vectors: bytes,
        group_id: int = 0,
        instance: int = 0,
        failures: Sequence[NonceFailure] = (),
    ) -> ArtifactBatch:
        """Number and buffer one batch (its artifacts, and its nonces without one; of nonce group `group_id`,
        computed by engine instance `instance`), wake the round's subscribers, return the batch."""
        round_ = self._round(round_id)
        if round_.end_reason is not None:
            raise RoundClosed(f"round {echoed(round_id)} has ended ({round_.end_reason.value})")
        batch = round_.buffer.append(nonces, vectors, group_id, instance, failures)
        round_.notify()
        return batch

    def close_round(self, round_id: str, reason: EndReason, detail: str = "") -> None:
        """End a round: subscribers get an EndEvent after its last batch; it stays readable for the
        retention time. Closing an ended round changes nothing (the first reason stands, so a round that
        failed is not relabelled by the shutdown that follows)."""
        round_ = self._round(round_id)
        if round_.end_reason is not None:
            return
        round_.end_reason = reason
        round_.end_detail = detail
        round_.closed_at = self._clock()
        round_.notify()

    def shutdown(self, detail: str = "") -> None:
        """Close every open round with SHUTTING_DOWN and refuse new rounds."""
        self._shut_down = True
        for round_id, round_ in list(self._rounds.items()):
            if round_.end_reason is None:
                self.close_round(round_id, EndReason.SHUTTING_DOWN, detail)

    def subscribe(self, round_id: str | None, after_sequence: int = 0) -> AsyncGenerator[HubEvent, None]:
        """Events of a round (None: the current one) from sequence after_sequence + 1 on, ending with an
        EndEvent once the round is closed. Raises RoundNotFound here, before any event, so a caller can
        refuse the request up front.

        Iterate it inside `contextlib.aclosing(...)`: a stream abandoned between events is otherwise only
        finalised (and its subscriber count released) when it is garbage-collected."""
        if after_sequence < 0:
            raise ValueError(f"after_sequence must be >= 0, got {after_sequence}")
        return self._events(self._resolve(round_id), after_sequence)

    def stats(self, round_id: str | None = None) -> RoundStats:
        round_ = self._resolve(round_id)
        buffer = round_.buffer
        return RoundStats(
            round_id=round_.round_id,
            k_dim=buffer.k_dim,
            batches_published=buffer.last_sequence,
            artifacts_published=buffer.artifacts_published,
            last_sequence=buffer.last_sequence,
            subscribers=round_.subscribers,
            buffered_batches=buffer.buffered_batches,
            buffered_artifacts=buffer.buffered_artifacts,
            end_reason=round_.end_reason,
            end_detail=round_.end_detail,
        )

    def holds(self, round_id: str) -> bool:
        """Whether the round is open, or ended within the retention time."""
        self.drop_expired()
        return round_id in self._rounds

    def current_round_id(self) -> str | None:
        self.drop_expired()
        return self._current_id if self._current_id in self._rounds else None

    def drop_expired(self) -> None:
        """Forget rounds closed longer ago than the retention time. Their live subscribers keep reading
        what they hold; only new lookups fail."""
        now = self._clock()
        expired = [
            round_id
            for round_id, round_ in self._rounds.items()
            if round_.closed_at is not None and now - round_.closed_at >= self._retention_seconds
        ]
        for round_id in expired:
            del self._rounds[round_id]

    def _resolve(self, round_id: str | None) -> _Round:
        if round_id is None:
            current = self.current_round_id()
            if current is None:
                raise RoundNotFound("no current PoC round")
            round_id = current
        return self._round(round_id)

    def _round(self, round_id: str) -> _Round:
        self.drop_expired()
        try:
            return self._rounds[round_id]
        except KeyError:
            raise RoundNotFound(f"no PoC round {echoed(round_id)}") from None

    async def _events(self, round_: _Round, after_sequence: int) -> AsyncGenerator[HubEvent, None]:
        buffer = round_.buffer
        cursor = after_sequence  # the last sequence this subscriber has seen or been told it lost
        round_.subscribers += 1
        try:
            while True:
                wanted = cursor + 1
                if wanted <= buffer.last_sequence:
                    first_buffered = buffer.first_buffered_sequence
                    if wanted < first_buffered:
                        last_missing = first_buffered - 1
                        yield LostEvent(
                            wanted,
                            last_missing,
                            last_missing - wanted + 1,
                            buffer.artifacts_between(wanted, last_missing),
                        )
                        cursor = last_missing
                    else:
                        yield BatchEvent(buffer.batch(wanted))
                        cursor = wanted
                elif round_.end_reason is not None:
                    yield EndEvent(round_.end_reason, round_.end_detail, buffer.last_sequence)
                    return
                else:
                    await round_.changed().wait()
        finally:
            round_.subscribers -= 1
