"""uvicorn serving the management API on the server's own event loop, beside the gRPC server: one process, one
engine, the same objects (a second process would need a second engine, or a copy of the round state)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import socket
from collections.abc import Awaitable, Callable, Iterator

import uvicorn
from fastapi import FastAPI

from server.http.options import HttpOptions, InferencePortOptions

log = logging.getLogger(__name__)


class _LoopServer(uvicorn.Server):
    """uvicorn without its signal handlers: the server's ShutdownTrigger owns SIGTERM and SIGINT, and stops this
    listener in its shutdown order (uvicorn's own would replace the trigger's handlers while it serves)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class ManagementServer:
    def __init__(
        self,
        app: FastAPI,
        options: HttpOptions | InferencePortOptions,
        graceful_seconds: float,
        label: str = "management API",
        flag: str = "--http-port",
        on_stop: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """`on_stop`: awaited once the listener has stopped (the application's own background work ends there)."""
        self._options = options
        self._on_stop = on_stop
        # What the listener serves, and the flag that asked for it (in its log line and start-up errors).
        self.label = label
        self.flag = flag
        config = uvicorn.Config(
            app,
            # log_config None: uvicorn leaves the server's logging configuration alone.
            log_config=None,
            # The API node polls state and health every minute: no line per request.
            access_log=False,
            lifespan="off",
            # Whole seconds in uvicorn's typing.
            timeout_graceful_shutdown=math.ceil(graceful_seconds),
        )
        self._server = _LoopServer(config)
        self._task: asyncio.Task[None] | None = None

    @property
    def address(self) -> str:
        return self._options.address

    async def start(self) -> None:
        """Raises OSError when the address cannot be bound (bound here: uvicorn would exit the process instead)."""
        listener = socket.create_server(
            (self._options.host, self._options.port),
            family=socket.AF_INET6 if ":" in self._options.host else socket.AF_INET,
            reuse_port=False,
        )
        self._task = asyncio.create_task(self._server.serve(sockets=[listener]), name=f"http {self.label}")
        while not self._server.started:
            if self._task.done():
                self._task.result()  # its failure, if it raised one
                raise OSError(f"the {self.label} on {self.address} ended before it served")
            await asyncio.sleep(0.01)
        log.info("%s on http://%s (plain HTTP, no token: docs/http-api.md)", self.label, self.address)

    async def stop(self) -> None:
        """Stops accepting, lets requests in flight finish within the grace, then cancels what remains."""
        if self._task is None:
            return
        self._server.should_exit = True
        await self._task
        self._task = None
        if self._on_stop is not None:
            await self._on_stop()
