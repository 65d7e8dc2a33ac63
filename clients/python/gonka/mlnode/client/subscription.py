"""Where an artifact subscription resumes after its connection drops, and whether it may.

SubscribeArtifacts is resumable by contract: a subscriber that reconnects with the last sequence it
received misses nothing still buffered, and is told what it missed otherwise (ArtifactsLost). The
cursor below keeps that sequence and pins the round, so that a subscription opened on "the running
round" never resumes into a different round started in between.
"""

from __future__ import annotations

from collections.abc import Callable

import grpc

from gonka.mlnode.client.errors import ServerError
from gonka.mlnode.v1 import poc_pb2

# Called before each reconnect with the error that ended the stream and the attempt number (1-based).
RetryHook = Callable[[ServerError, int], None]


def ended_without_end() -> ServerError:
    """A stream that closed cleanly before its SubscriptionEnd: the server always sends one, so
    something between the two ends (a proxy, a load balancer) cut it, and it is resumed like a drop."""
    return ServerError(grpc.StatusCode.UNAVAILABLE, "the subscription stream closed before its SubscriptionEnd")


def is_dropped_connection(error: ServerError) -> bool:
    """UNAVAILABLE without a server reason is the transport's (connection reset, peer gone). The
    server's own UNAVAILABLE answers carry a reason (SHUTTING_DOWN, ENGINE_DEAD): reconnecting does
    not change those, so they are raised to the caller."""
    return error.code == grpc.StatusCode.UNAVAILABLE and not error.reason


class SubscriptionCursor:
    def __init__(
        self,
        round_id: str | None,
        after_sequence: int,
        max_retries: int,
        retry_delay: float,
        on_retry: RetryHook | None = None,
    ) -> None:
        if max_retries < 0 or retry_delay < 0:
            raise ValueError(f"max_retries and retry_delay must be >= 0, got {max_retries} and {retry_delay}")
        self.round_id = round_id
        self.after_sequence = after_sequence
        self._max_retries = max_retries
        self._retry_delay = retry_delay
        self._on_retry = on_retry
        self._failures = 0

    def saw(self, response: poc_pb2.SubscribeArtifactsResponse) -> None:
        if response.round_id:
            self.round_id = response.round_id
        if response.HasField("batch"):
            self.after_sequence = response.batch.sequence
        elif response.HasField("lost"):
            # Past the lost range: resuming inside it would only be told of the same loss again.
            self.after_sequence = max(self.after_sequence, response.lost.last_missing_sequence)
        # Retries are bounded per outage, not per subscription: a long round may survive many drops.
        self._failures = 0

    def retry_delay(self, error: ServerError) -> float:
        """Seconds to wait before resuming after `error`; raises it when it is not a dropped
        connection or this outage has used up its retries."""
        if not is_dropped_connection(error) or self._failures >= self._max_retries:
            raise error
        self._failures += 1
        if self._on_retry is not None:
            self._on_retry(error, self._failures)
        # Linear back-off: a server that restarts takes seconds, a reset connection none.
        return self._retry_delay * self._failures
