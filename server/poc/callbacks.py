"""Delivers a round's artifacts to the API node's `{url}/generated`, as the deployed server does: every
interval, everything not yet sent in one JSON body, retried on the deployed schedule.

What happens to a body that is not delivered:
- the receiver refused it through the whole schedule (status >= 400, e.g. 503 outside its accepting
  window): given up and counted, as deployed; the receiver answered, and resending will not change that;
- it never reached the receiver (connection errors, timeouts) through the whole schedule: spooled, so
  the next start can deliver it;
- the callback was closed before it settled (the flush bound ran out): spooled, with everything still
  waiting to be sent. The deployed server drops that work on stop; here nothing produced is lost.
A body cut off mid-request may have reached the receiver, so delivery is at least once.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

import aiohttp

from engine_ext.consensus.artifact import encoding_metadata

from .artifacts import ArtifactBatch
from .retry import PostOutcome, RetrySchedule, post_with_retry
from .spool import Spool

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CallbackIdentity:
    """Who produced the artifacts, as the receiver files them."""

    public_key: str
    block_hash: str
    block_height: int
    node_id: int


@dataclass(frozen=True)
class DeliveryCounts:
    delivered_artifacts: int
    pending_artifacts: int  # waiting for the next body, or in the body being sent
    spooled_artifacts: int
    given_up_artifacts: int
    failed_attempts: int


class ArtifactCallback:
    def __init__(
        self,
        url: str,
        identity: CallbackIdentity,
        k_dim: int,
        spool: Spool,
        session: aiohttp.ClientSession,
        interval_seconds: float = 5.0,
        retry: RetrySchedule = RetrySchedule(),
    ) -> None:
        if interval_seconds <= 0:
            raise ValueError(f"interval_seconds must be > 0, got {interval_seconds}")
        self.generated_url = url.rstrip("/") + "/generated"
        self._identity = identity
        self._encoding = encoding_metadata(k_dim)
        self._k_dim = k_dim
        self._spool = spool
        self._session = session
        self._interval_seconds = interval_seconds
        self._retry = retry
        self._waiting: list[dict[str, object]] = []
        self._sending: list[dict[str, object]] = []
        self._finish_requested = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._delivered = 0
        self._spooled = 0
        self._given_up = 0
        self._failed_attempts = 0

    def start(self) -> None:
        """Start the background sender on the running event loop (once; later calls change nothing)."""
        if self._task is not None:
            return
        self._task = asyncio.get_running_loop().create_task(self._send_loop(), name=f"poc-callback {self.generated_url}")

    def add(self, batch: ArtifactBatch) -> None:
        if self._finish_requested.is_set():
            raise RuntimeError("the artifact callback is finished: it takes no more artifacts")
        if batch.k_dim != self._k_dim:
            raise ValueError(f"batch k_dim {batch.k_dim} differs from the callback's {self._k_dim}")
        self._waiting.extend(
            {"nonce": nonce, "vector_b64": batch.vector_b64(index)} for index, nonce in enumerate(batch.nonces)
        )

    def finish(self) -> None:
        """No more artifacts: send what is left now, without waiting for the interval, on the normal
        retry schedule. The sender stops once everything is settled."""
        self._finish_requested.set()

    @property
    def finished(self) -> bool:
        """finish() was called and everything added is settled (delivered, given up or spooled)."""
        return self._finish_requested.is_set() and not self._waiting and not self._sending and (
            self._task is None or self._task.done()
        )

    async def close(self, flush_timeout_seconds: float) -> None:
        """finish(), wait up to the bound for the final flush, then spool whatever is still unsettled."""
        self.finish()
        if self._task is None:
            self.start()
        task = self._task
        assert task is not None
        try:
            await asyncio.wait({task}, timeout=max(flush_timeout_seconds, 0.0))
        finally:
            # Also when close itself is cancelled: a cancelled sender leaves its state as it was, so what it
            # held can be spooled right here, before it unwinds.
            task.cancel()
            self._spool_unsettled()
        await asyncio.wait({task})
        if not task.cancelled() and (error := task.exception()) is not None:
            raise error

    def counts(self) -> DeliveryCounts:
        return DeliveryCounts(
            delivered_artifacts=self._delivered,
            pending_artifacts=len(self._waiting) + len(self._sending),
            spooled_artifacts=self._spooled,
            given_up_artifacts=self._given_up,
            failed_attempts=self._failed_attempts,
        )

    async def _send_loop(self) -> None:
        while True:
            if not self._finish_requested.is_set():
                try:
                    await asyncio.wait_for(self._finish_requested.wait(), self._interval_seconds)
                except asyncio.TimeoutError:
                    pass
            if not self._waiting:
                if self._finish_requested.is_set():
                    return
                continue
            # Artifacts that arrive while this body is retried wait for the next one: each artifact is
            # in exactly one body.
            self._sending, self._waiting = self._waiting, []
            outcome = await post_with_retry(
                self._session, self.generated_url, self._body(self._sending), self._retry, self._count_failed_attempt
            )
            self._settle(outcome)

    def _settle(self, outcome: PostOutcome) -> None:
        count = len(self._sending)
        if outcome is PostOutcome.DELIVERED:
            self._delivered += count
        elif outcome is PostOutcome.REFUSED:
            self._given_up += count
            log.warning("PoC callback %s refused %d artifacts through the retry schedule: given up", self.generated_url, count)
        else:
            self._spool.append(self.generated_url, self._body(self._sending))
            self._spooled += count
            log.warning("PoC callback %s unreachable: %d artifacts spooled for the next start", self.generated_url, count)
        self._sending = []

    def _spool_unsettled(self) -> None:
        unsettled = self._sending + self._waiting
        self._sending, self._waiting = [], []
        if unsettled:
            self._spool.append(self.generated_url, self._body(unsettled))
            self._spooled += len(unsettled)
            log.warning("PoC callback %s closed: %d undelivered artifacts spooled", self.generated_url, len(unsettled))

    def _count_failed_attempt(self) -> None:
        self._failed_attempts += 1

    def _body(self, artifacts: list[dict[str, object]]) -> dict[str, object]:
        return {
            "public_key": self._identity.public_key,
            "block_hash": self._identity.block_hash,
            "block_height": self._identity.block_height,
            "node_id": self._identity.node_id,
            "artifacts": artifacts,
            "encoding": self._encoding,
        }
