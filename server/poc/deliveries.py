"""The owner of every callback delivery in flight (artifact callbacks and validation results), so that
shutdown can bound them all with one flush timeout and spool whatever is still unsettled."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp

from .callbacks import ArtifactCallback, CallbackIdentity
from .retry import PostOutcome, RetrySchedule
from .spool import Spool
from .validated import post_validated, require_validated_fields, validated_url

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ValidatedCounts:
    """Validation results (one POST body each) over this object's life."""

    delivered: int
    pending: int
    spooled: int
    given_up: int
    failed_attempts: int


class CallbackDeliveries:
    def __init__(
        self,
        session: aiohttp.ClientSession,
        spool: Spool,
        retry: RetrySchedule = RetrySchedule(),
        interval_seconds: float = 5.0,
    ) -> None:
        self._session = session
        self._spool = spool
        self._retry = retry
        self._interval_seconds = interval_seconds
        self._callbacks: list[ArtifactCallback] = []
        self._validated: dict[asyncio.Task[PostOutcome], tuple[str, Mapping[str, Any]]] = {}
        self._closed = False
        self._validated_delivered = 0
        self._validated_spooled = 0
        self._validated_given_up = 0
        self._validated_failed_attempts = 0

    def artifact_callback(self, url: str, identity: CallbackIdentity, k_dim: int) -> ArtifactCallback:
        """A started callback for one round, tracked until it has settled everything. When the round ends,
        finish() delivers the rest on the full schedule while the process keeps running; close() here, at
        shutdown, bounds whatever is still unsettled and spools it."""
        self._require_open()
        self._callbacks = [callback for callback in self._callbacks if not callback.finished]
        callback = ArtifactCallback(url, identity, k_dim, self._spool, self._session, self._interval_seconds, self._retry)
        callback.start()
        self._callbacks.append(callback)
        return callback

    def post_validated(self, url: str, body: Mapping[str, Any]) -> asyncio.Task[PostOutcome]:
        """Deliver a validation result in the background; the task's result is how it settled."""
        self._require_open()
        require_validated_fields(body)
        task = asyncio.get_running_loop().create_task(
            post_validated(self._session, url, body, self._retry, self._spool, self._count_validated_failed_attempt),
            name=f"poc-validated {body['request_id']}",
        )
        self._validated[task] = (url, body)
        task.add_done_callback(self._settle_validated)
        return task

    def validated_counts(self) -> ValidatedCounts:
        return ValidatedCounts(
            delivered=self._validated_delivered,
            pending=len(self._validated),
            spooled=self._validated_spooled,
            given_up=self._validated_given_up,
            failed_attempts=self._validated_failed_attempts,
        )

    async def close(self, flush_timeout_seconds: float) -> None:
        """Refuse new deliveries, give those in flight up to the bound, spool what is left."""
        self._closed = True
        timeout = max(flush_timeout_seconds, 0.0)
        results = await asyncio.gather(
            *(callback.close(timeout) for callback in self._callbacks), self._close_validated(timeout), return_exceptions=True
        )
        # Every close runs to its end (and spools) before the first failure is raised.
        errors = [result for result in results if isinstance(result, BaseException)]
        if errors:
            raise errors[0]

    async def _close_validated(self, timeout: float) -> None:
        tasks = set(self._validated)
        if not tasks:
            return
        _, unsettled = await asyncio.wait(tasks, timeout=timeout)
        for task in unsettled:
            task.cancel()  # _settle_validated spools its body
        if unsettled:
            await asyncio.wait(unsettled)

    def _settle_validated(self, task: asyncio.Task[PostOutcome]) -> None:
        url, body = self._validated.pop(task)
        if task.cancelled():
            self._spool.append(validated_url(url), body)
            self._validated_spooled += 1
            return
        error = task.exception()
        if error is not None:
            self._spool.append(validated_url(url), body)
            self._validated_spooled += 1
            log.error("validation result %s: delivery failed, spooled", body["request_id"], exc_info=error)
            return
        outcome = task.result()
        if outcome is PostOutcome.DELIVERED:
            self._validated_delivered += 1
        elif outcome is PostOutcome.UNREACHABLE:
            self._validated_spooled += 1  # post_validated spooled it
        else:
            self._validated_given_up += 1

    def _count_validated_failed_attempt(self) -> None:
        self._validated_failed_attempts += 1

    def _require_open(self) -> None:
        if self._closed:
            raise RuntimeError("callback deliveries are closed")
