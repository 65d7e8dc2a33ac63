"""Why and how urgently the server should stop: signals, engine death."""

from __future__ import annotations

import asyncio
import logging
import signal

log = logging.getLogger(__name__)


class ShutdownTrigger:
    def __init__(self) -> None:
        self._requested = asyncio.Event()
        self._forced = asyncio.Event()
        self.reason = ""
        self.exit_code = 0

    def request(self, reason: str, exit_code: int = 0) -> None:
        """The first request starts a graceful shutdown; a second one cuts the grace short."""
        if self._requested.is_set():
            log.warning("%s during shutdown: aborting in-flight requests now", reason)
            self._forced.set()
            return
        self.reason, self.exit_code = reason, exit_code
        self._requested.set()

    def install_signal_handlers(self) -> None:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self.request, signal.Signals(signum).name)

    async def wait(self) -> None:
        await self._requested.wait()

    async def wait_forced(self) -> None:
        await self._forced.wait()
