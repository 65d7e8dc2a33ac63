"""The priority gate: while a mining round runs, inference on the engine is held off.

One object, shared by the round control (which closes it before the round's first forward and opens
it after the last one has returned), the gate interceptor (which refuses new inference RPCs before
any response message) and the inference servicers (which tell a stream preempted by a round from one
aborted for another reason, and refuse requests that slipped past the interceptor).
"""

from __future__ import annotations

import grpc

from server.core.errors import Reason, ServiceError

DEFAULT_RETRY_AFTER_SECONDS = 5.0


class PriorityGate:
    def __init__(self, retry_after_seconds: float = DEFAULT_RETRY_AFTER_SECONDS) -> None:
        self.retry_after_seconds = retry_after_seconds
        self._round_id: str | None = None
        # Incremented at every close: a stream that saw another value when it started was running
        # when a round began.
        self._closings = 0

    def close(self, round_id: str) -> None:
        self._round_id = round_id
        self._closings += 1

    def open(self) -> None:
        self._round_id = None

    @property
    def closed(self) -> bool:
        return self._round_id is not None

    @property
    def round_id(self) -> str | None:
        return self._round_id

    @property
    def closings(self) -> int:
        return self._closings

    def require_open(self) -> None:
        if self.closed:
            raise self.refusal()

    def refusal(self) -> ServiceError:
        return ServiceError(
            grpc.StatusCode.UNAVAILABLE,
            Reason.POC_IN_PROGRESS,
            f"a Proof-of-Compute round ({self._round_id}) is running; inference resumes when it stops",
            retry_after_seconds=self.retry_after_seconds,
        )

    def preemption(self) -> ServiceError:
        return ServiceError(
            grpc.StatusCode.UNAVAILABLE,
            Reason.POC_PREEMPTED,
            "aborted: a Proof-of-Compute round started; every token produced before it was delivered",
            retry_after_seconds=self.retry_after_seconds,
        )
