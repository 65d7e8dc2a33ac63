"""The server's active Generate requests, by request id: duplicates, Abort, draining on shutdown."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import grpc

from server.core.errors import Reason, ServiceError, echoed


@dataclass
class ActiveRequest:
    request_id: str
    # Set by Abort; the stream re-sends the abort if it raced the engine's registration.
    abort_requested: bool = False
    # The engine the request was sent to (its instance's), once it was: where Abort finds it.
    engine: Any = None


class RequestRegistry:
    def __init__(self) -> None:
        self._active: dict[str, ActiveRequest] = {}
        self._empty = asyncio.Event()
        self._empty.set()

    @contextmanager
    def track(self, request_id: str) -> Iterator[ActiveRequest]:
        if request_id in self._active:
            raise ServiceError(
                grpc.StatusCode.ALREADY_EXISTS,
                Reason.DUPLICATE_REQUEST_ID,
                f"request_id: {echoed(request_id)} is already in use by an active request",
                field="request_id",
            )
        entry = ActiveRequest(request_id)
        self._active[request_id] = entry
        self._empty.clear()
        try:
            yield entry
        finally:
            del self._active[request_id]
            if not self._active:
                self._empty.set()

    def get(self, request_id: str) -> ActiveRequest | None:
        return self._active.get(request_id)

    def request_ids(self) -> list[str]:
        return list(self._active)

    def __len__(self) -> int:
        return len(self._active)

    async def wait_until_empty(self, timeout: float) -> bool:
        """True if every active request ended within `timeout` seconds."""
        try:
            await asyncio.wait_for(self._empty.wait(), timeout)
        except asyncio.TimeoutError:
            return False
        return True
