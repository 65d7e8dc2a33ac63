"""The pull stream's buffer (mlnode.poc.v1.PoCCallbackStream, spec section 6): the callbacks the API node did not
give a URL for, held until its consumer acknowledges them.

As published:
- ids are `"{boot_id}-{seq}"`: `boot_id` is 16 random hex characters per buffer (one per process), `seq` counts
  from 1;
- a consumer (`stream`) first drops every callback up to its `resume_after_id` when that id is of this boot (as if
  acknowledged; an empty id or another boot's drops nothing), then gets every buffered callback once, in `seq` order,
  then each new one as it comes; it never ends by itself, only when a newer consumer takes over (one consumer at a
  time) or the buffer closes;
- `ack` removes callbacks; the unacknowledged stay and go again to the next consumer;
- at most `capacity` (16,384) callbacks: beyond it the oldest is dropped, with a warning.

In memory, as deployed: what is buffered is lost when the process ends (a callback with a URL goes through the
durable store instead). Runs on the event loop: not thread-safe.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import secrets
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import quote

from server.poc.delivery.body_json import encode_body

log = logging.getLogger(__name__)

DEFAULT_CAPACITY = 16_384
BOOT_ID_BYTES = 8  # 16 hex characters


class CallbackSink(Protocol):
    """Where a callback goes when the API node gave no URL: `path` as the API node's ML server routes it
    (poc_batches_path), `body` the JSON object the push path would POST there."""

    def post(self, path: str, body: Mapping[str, object]) -> str:
        """Takes the callback; returns its id."""
        ...


def poc_batches_path(model: str, kind: str) -> str:
    """`/v2/poc-batches/{model}/{kind}` (kind: generated or validated), the model escaped twice as the API node's own
    callback URL carries it (Go's PathEscape twice: a `/` in the model is `%252F`; the API node unescapes once)."""
    return f"/v2/poc-batches/{quote(quote(model, safe=''), safe='')}/{kind}"


@dataclass(frozen=True)
class StreamedCallback:
    id: str
    path: str
    body: bytes


class StreamEnd(enum.Enum):
    """Why a consumer's stream ended (it never ends by itself)."""

    TAKEN_OVER = "a newer StreamCallbacks took over"
    CLOSED = "the server is shutting down"


class CallbackConsumer:
    """One consumer's stream (CallbackBuffer.open_stream): `callbacks()` yields until `ended` says why it stopped."""

    def __init__(self, buffer: CallbackBuffer) -> None:
        self._buffer = buffer
        self.ended: StreamEnd | None = None
        self._wake = asyncio.Event()

    async def callbacks(self) -> AsyncIterator[StreamedCallback]:
        """Every buffered callback once, in seq order, then each new one, until the stream ends."""
        sent_through = 0
        while self.ended is None:
            callback = self._buffer.next_after(sent_through)
            if callback is None:
                self._wake.clear()
                await self._wake.wait()
                continue
            sent_through, streamed = callback
            yield streamed

    def end(self, why: StreamEnd) -> None:
        if self.ended is None:
            self.ended = why
        self._wake.set()

    def wake(self) -> None:
        self._wake.set()


class CallbackBuffer:
    def __init__(self, capacity: int = DEFAULT_CAPACITY, boot_id: str | None = None) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.boot_id = boot_id if boot_id is not None else secrets.token_hex(BOOT_ID_BYTES)
        self._capacity = capacity
        # seq -> (path, body), in seq order (a dict keeps insertion order; acknowledgements remove from anywhere).
        self._entries: dict[int, tuple[str, bytes]] = {}
        self._last_seq = 0
        self._consumer: CallbackConsumer | None = None
        self._closed = False
        # Over the buffer's life, for the log and tests.
        self.dropped = 0

    def __len__(self) -> int:
        return len(self._entries)

    def post(self, path: str, body: Mapping[str, object]) -> str:
        """CallbackSink.post: buffers the callback (its body as compact JSON) for the consumer."""
        self._last_seq += 1
        self._entries[self._last_seq] = (path, encode_body(body))
        while len(self._entries) > self._capacity:
            oldest = next(iter(self._entries))
            dropped_path, _ = self._entries.pop(oldest)
            self.dropped += 1
            log.warning(
                "pull stream: %d callbacks unacknowledged, the bound: dropped the oldest, %s (%s; %d dropped so far)",
                self._capacity,
                self._id(oldest),
                dropped_path,
                self.dropped,
            )
        if self._consumer is not None:
            self._consumer.wake()
        return self._id(self._last_seq)

    def ack(self, ids: Iterable[str]) -> int:
        """Removes the callbacks of these ids; returns how many were buffered (another boot's, an unknown or an
        already acknowledged id changes nothing)."""
        removed = 0
        for callback_id in ids:
            seq = self._seq_of(callback_id)
            if seq is not None and self._entries.pop(seq, None) is not None:
                removed += 1
        return removed

    def open_stream(self, resume_after_id: str) -> CallbackConsumer:
        """A new consumer, which ends the earlier one's stream. With an id of this boot, every callback up to it is
        dropped first, as if acknowledged; an empty id, or another boot's, drops nothing."""
        if self._consumer is not None:
            self._consumer.end(StreamEnd.TAKEN_OVER)
        resumed_at = self._seq_of(resume_after_id)
        if resumed_at is not None:
            for seq in [seq for seq in self._entries if seq <= resumed_at]:
                del self._entries[seq]
        self._consumer = CallbackConsumer(self)
        if self._closed:
            self._consumer.end(StreamEnd.CLOSED)
        return self._consumer

    def close(self) -> None:
        """Ends the consumer's stream, and any later one at once (the server shuts down); what is buffered is lost
        with the process."""
        self._closed = True
        if self._consumer is not None:
            self._consumer.end(StreamEnd.CLOSED)

    def next_after(self, sent_through: int) -> tuple[int, StreamedCallback] | None:
        """The oldest buffered callback after seq `sent_through`; None when the consumer has had everything."""
        if not self._entries:
            return None
        for seq in range(max(sent_through + 1, next(iter(self._entries))), self._last_seq + 1):
            entry = self._entries.get(seq)
            if entry is not None:
                return seq, StreamedCallback(self._id(seq), *entry)
        return None

    def _id(self, seq: int) -> str:
        return f"{self.boot_id}-{seq}"

    def _seq_of(self, callback_id: str) -> int | None:
        """The seq of an id of this boot; None for an empty id, another boot's, or one that is no id of ours."""
        prefix, separator, seq = callback_id.rpartition("-")
        if not separator or prefix != self.boot_id or not seq.isdigit():
            return None
        return int(seq)
