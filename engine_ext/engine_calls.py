"""Bounded waits on calls into the engine (utility calls, collective RPCs), and what a stuck one means.

vLLM's engine core runs utility calls between steps and its single-process executor runs
collective RPCs inside that same loop, so a call in flight cannot be interrupted: a stuck engine
would hang its caller forever. Here a caller waits at most `timeout_seconds` (then
EngineCallTimeout), while the call itself runs on and stays tracked; a call still unanswered
after `stuck_after_seconds` makes `problem()` say so, which the server turns into NOT_SERVING.
Engine work (a PoC batch) is waited on up to `work_timeout_seconds`: as long as the engine may go
unanswered before it counts as stuck.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from engine_ext.generation.errors import EngineCallTimeout

T = TypeVar("T")


class EngineCalls:
    def __init__(
        self, timeout_seconds: float, stuck_after_seconds: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.timeout_seconds = timeout_seconds
        self.stuck_after_seconds = stuck_after_seconds
        self._clock = clock
        # Calls not yet answered: task -> (name, start time).
        self._pending: dict[asyncio.Future, tuple[str, float]] = {}

    @property
    def work_timeout_seconds(self) -> float:
        """The wait on engine work rather than on a report: a PoC batch's first run at a new shape may compile
        kernels (DeepSeek-V4's TileLang and Triton kernels took over 30 s in one batch on an H200), which only the
        stuck threshold may cut off."""
        return max(self.timeout_seconds, self.stuck_after_seconds)

    async def call(self, name: str, call: Awaitable[T], timeout_seconds: float | None = None) -> T:
        """Waits at most `timeout_seconds` (default: the engine-call timeout) for the call's answer."""
        limit = self.timeout_seconds if timeout_seconds is None else timeout_seconds
        task = asyncio.ensure_future(call)
        self._pending[task] = (name, self._clock())
        task.add_done_callback(self._answered)
        try:
            # shield: a caller that gives up (timeout, cancelled RPC) leaves the call running and tracked.
            return await asyncio.wait_for(asyncio.shield(task), limit)
        except asyncio.TimeoutError:
            raise EngineCallTimeout(name, limit, answered=task) from None

    def problem(self) -> str | None:
        """Why the engine counts as stuck (its oldest unanswered call is too old), or None."""
        if not self._pending:
            return None
        name, started = min(self._pending.values(), key=lambda pending: pending[1])
        waited = self._clock() - started
        if waited < self.stuck_after_seconds:
            return None
        return f"the engine has not answered {name} for {waited:.0f} s (stuck after {self.stuck_after_seconds:g} s)"

    def _answered(self, task: asyncio.Future) -> None:
        self._pending.pop(task, None)
        if not task.cancelled():
            task.exception()  # retrieved, so an abandoned call's failure is not reported as unhandled
