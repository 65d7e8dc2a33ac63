"""Whether new work is admitted: closed once shutdown begins, bounded in concurrent streams, and, for
inference, held off while the priority gate is closed for a mining round."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager

import grpc

from server.core.errors import Reason, ServiceError
from server.poc.gate.priority_gate import PriorityGate

SHUTDOWN_RETRY_AFTER_SECONDS = 1.0
# Streams end every few seconds under load; retrying sooner would mostly meet the same bound.
BUSY_RETRY_AFTER_SECONDS = 1.0


class Admission:
    def __init__(self, max_streams: int = 0, gate: PriorityGate | None = None) -> None:
        """`max_streams`: inference streams admitted at once; 0 admits any number. `gate`: the
        priority gate inference waits behind while a mining round runs."""
        self._open = True
        self.gate = gate or PriorityGate()
        self._max_streams = max_streams
        self._streams = 0
        # Replays waiting for a slot (waiting_slot), woken one per slot given back.
        self._waiters: deque[asyncio.Future[None]] = deque()

    def close(self) -> None:
        self._open = False
        # Waiting replays wake to be refused (require_open) rather than wait for slots.
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)

    @property
    def is_open(self) -> bool:
        return self._open

    def require_open(self) -> None:
        if not self._open:
            raise self.refusal()

    @contextmanager
    def stream(self) -> Iterator[None]:
        """Holds one inference stream slot while the block runs; refused (before any engine work) when
        shutting down, while a mining round holds the priority gate, or when every slot is taken."""
        self.require_open()
        self.gate.require_open()
        if self._max_streams and self._streams >= self._max_streams:
            raise ServiceError(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                Reason.TOO_MANY_STREAMS,
                f"the server already serves {self._max_streams} streams, its bound (--max-concurrent-streams); "
                "retry later or send the request to another node",
                retry_after_seconds=BUSY_RETRY_AFTER_SECONDS,
            )
        self._streams += 1
        try:
            yield
        finally:
            self._release()

    @asynccontextmanager
    async def waiting_slot(self) -> AsyncIterator[None]:
        """Holds one slot of the same bound while the block runs, waiting for one to be free instead of
        being refused: the engine requests of a call already admitted (ValidateInference's replays).
        Refused when shutting down."""
        self.require_open()
        while self._max_streams and self._streams >= self._max_streams:
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
            self.require_open()
        self._streams += 1
        try:
            yield
        finally:
            self._release()

    @property
    def streams(self) -> int:
        """Slots held now."""
        return self._streams

    def _release(self) -> None:
        self._streams -= 1
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def refusal(self) -> ServiceError:
        return ServiceError(
            grpc.StatusCode.UNAVAILABLE,
            Reason.SHUTTING_DOWN,
            "the server is shutting down; send the request to another node",
            retry_after_seconds=SHUTDOWN_RETRY_AFTER_SECONDS,
        )
