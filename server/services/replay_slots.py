"""The engine requests of one ValidateInference call, on the server's stream bound.

A call is admitted with one stream slot (Admission.stream: refused when none is free). Its replays
run concurrently, at most `most` at once; the call's own slot serves one of them, and every other
one running beside it holds a slot of its own, waiting for one to be free (Admission.waiting_slot).
So a call never puts more requests into the engine than --max-concurrent-streams allows. Once the
server is stopping no replay starts: the items left get SHUTTING_DOWN.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from server.poc.gate.admission import Admission


class ReplaySlots:
    def __init__(self, admission: Admission, most: int) -> None:
        self._admission = admission
        self._per_call = asyncio.Semaphore(most)
        self._call_slot_free = True

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Refused (SHUTTING_DOWN) once the server is stopping: no replay starts then."""
        async with self._per_call:
            self._admission.require_open()
            if self._call_slot_free:
                self._call_slot_free = False
                try:
                    yield
                finally:
                    self._call_slot_free = True
            else:
                async with self._admission.waiting_slot():
                    yield
