"""A real HTTP receiver on 127.0.0.1 for callback tests: records every POST body by path (with its
Idempotency-Key header), and can answer the first N of them 503 (as the network's API node does outside
its accepting windows), or with another status (400: a body it rejects)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web


class HttpReceiver:
    def __init__(self, fail_first: int = 0, port: int = 0, fail_status: int = 503) -> None:
        self.fail_first = fail_first
        self.fail_status = fail_status
        self.attempts = 0
        self.bodies: dict[str, list[dict[str, Any]]] = {}
        self.idempotency_keys: dict[str, list[str | None]] = {}
        self._port = port
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> "HttpReceiver":
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the HTTP receiver did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._stopped.set)
        self._thread.join(10)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._port}"

    def received(self, path: str) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.bodies.get(path, []))

    def keys(self, path: str) -> list[str | None]:
        """The Idempotency-Key of each body received() returns, in the same order (None: no header)."""
        with self._lock:
            return list(self.idempotency_keys.get(path, []))

    def wait_for(self, condition: Callable[["HttpReceiver"], bool], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if condition(self):
                return True
            time.sleep(0.1)
        return condition(self)

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._run())

    async def _run(self) -> None:
        app = web.Application()
        app.router.add_post("/{tail:.*}", self._handle)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", self._port)
        await site.start()
        self._port = site._server.sockets[0].getsockname()[1]  # aiohttp has no public accessor
        self._ready.set()
        while not self._stopped.is_set():
            await asyncio.sleep(0.05)
        await runner.cleanup()

    async def _handle(self, request: web.Request) -> web.Response:
        body = json.loads(await request.read())
        with self._lock:
            self.attempts += 1
            if self.attempts <= self.fail_first:
                return web.Response(status=self.fail_status, text="not accepting now")
            self.bodies.setdefault(request.path, []).append(body)
            self.idempotency_keys.setdefault(request.path, []).append(request.headers.get("Idempotency-Key"))
        return web.Response(status=200, text="ok")
