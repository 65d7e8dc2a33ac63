"""Whether new work is admitted; closed once shutdown begins."""

from __future__ import annotations

import grpc

from server.errors import Reason, ServiceError

SHUTDOWN_RETRY_AFTER_SECONDS = 1.0


class Admission:
    def __init__(self) -> None:
        self._open = True

    def close(self) -> None:
        self._open = False

    @property
    def is_open(self) -> bool:
        return self._open

    def require_open(self) -> None:
        if not self._open:
            raise self.refusal()

    def refusal(self) -> ServiceError:
        return ServiceError(
            grpc.StatusCode.UNAVAILABLE,
            Reason.SHUTTING_DOWN,
            "the server is shutting down; send the request to another node",
            retry_after_seconds=SHUTDOWN_RETRY_AFTER_SECONDS,
        )
