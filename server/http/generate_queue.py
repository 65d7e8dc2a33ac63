"""The FIFO of `pow/generate` jobs (spec section 1.2): a job is queued and answered at once (the API node gives up
after 20 s), one worker runs the jobs in arrival order, each after any running mining round has ended; a finished
job (completed, failed or cancelled) stays readable for `ttl_seconds` (300, as deployed), then is forgotten.
`cancel_all` (pow/stop, /api/v1/stop) cancels every queued job and the running one.

What a job computes is the caller's (server.http.generate_jobs); this module knows only its order, its state and
its nonces (the queue's bound, 429 beyond it)."""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from server.core.errors import ServiceError
from server.http.pow_requests import require_queue_room

log = logging.getLogger(__name__)

# How long a finished job's status and result stay readable (the deployed plugin's TTL).
FINISHED_KEPT_SECONDS = 300.0

# A job's work: its result is a JSON object (a validation job's the `/validated` body).
JobWork = Callable[[], Coroutine[Any, Any, Mapping[str, object]]]


class JobStatus(enum.Enum):
    QUEUED = "queued"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


@dataclass
class GenerateJob:
    request_id: str
    # The nonces it computes: what the queue's bound counts.
    nonces: int
    work: JobWork
    status: JobStatus = JobStatus.QUEUED
    result: Mapping[str, object] | None = None
    error: ServiceError | None = None
    finished_at: float | None = None


class GenerateQueue:
    def __init__(
        self,
        wait_until_idle: Callable[[], Awaitable[None]],
        computing: Callable[[], AbstractContextManager[None]],
        classify: Callable[[Exception], ServiceError],
        ttl_seconds: float = FINISHED_KEPT_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`wait_until_idle`: returns once no mining round runs (RoundControl.wait_until_idle). `computing`: held
        while a job runs (NodeState.validation_job: POW / VALIDATING). `classify`: a job's failure as the gRPC
        services name it (server.translation.engine_failures)."""
        self._wait_until_idle = wait_until_idle
        self._computing = computing
        self._classify = classify
        self._ttl_seconds = ttl_seconds
        self._clock = clock
        self._waiting: deque[GenerateJob] = deque()
        self._jobs: dict[str, GenerateJob] = {}
        self._running: tuple[GenerateJob, asyncio.Task[Mapping[str, object]]] | None = None
        self._worker: asyncio.Task[None] | None = None

    @property
    def nonces_queued(self) -> int:
        """The nonces of the jobs not yet finished (queued and running)."""
        running = 0 if self._running is None else self._running[0].nonces
        return running + sum(job.nonces for job in self._waiting)

    def submit(self, request_id: str, nonces: int, work: JobWork) -> GenerateJob:
        """Queues the job (429 when its nonces would pass the bound) and makes sure the worker runs."""
        require_queue_room(self.nonces_queued, nonces)
        self._forget_expired()
        job = GenerateJob(request_id, nonces, work)
        self._waiting.append(job)
        self._jobs[request_id] = job
        if self._worker is None:
            self._worker = asyncio.get_running_loop().create_task(self._run(), name="http-generate-queue")
        return job

    def job(self, request_id: str) -> GenerateJob | None:
        """None for an id never queued here, or finished more than the TTL ago."""
        self._forget_expired()
        return self._jobs.get(request_id)

    async def cancel_all(self) -> int:
        """Every queued job cancelled, and the running one (returns once it has ended); how many were cancelled."""
        cancelled = len(self._waiting)
        while self._waiting:
            self._finish(self._waiting.popleft(), JobStatus.CANCELLED)
        running = self._running
        if running is not None:
            job, task = running
            task.cancel()
            await asyncio.wait({task})
            self._record_end(job, task)
            cancelled += 1
        if cancelled:
            log.info("generate queue: %d job(s) cancelled", cancelled)
        return cancelled

    async def close(self) -> None:
        """Shutdown: nothing more runs; what is queued is cancelled."""
        worker = self._worker
        await self.cancel_all()
        if worker is not None and not worker.done():
            worker.cancel()
            await asyncio.wait({worker})

    async def _run(self) -> None:
        try:
            while self._waiting:
                # The deployed worker waits while its backend mines: the round has the engine first.
                await self._wait_until_idle()
                if not self._waiting:
                    break  # cancelled meanwhile
                job = self._waiting.popleft()
                await self._run_job(job)
        finally:
            self._worker = None

    async def _run_job(self, job: GenerateJob) -> None:
        job.status = JobStatus.RUNNING
        with self._computing():
            task = asyncio.get_running_loop().create_task(job.work(), name=f"generate-job {job.request_id}")
            self._running = (job, task)
            try:
                await asyncio.wait({task})
            except asyncio.CancelledError:
                task.cancel()
                await asyncio.wait({task})
                raise
            finally:
                self._running = None
                if task.done():
                    self._record_end(job, task)

    def _record_end(self, job: GenerateJob, task: asyncio.Task[Mapping[str, object]]) -> None:
        """Once per job, by whichever sees its task end first (the worker, or cancel_all)."""
        if job.finished_at is not None:
            return
        if task.cancelled():
            self._finish(job, JobStatus.CANCELLED)
            return
        error = task.exception()
        if error is None:
            job.result = task.result()
            self._finish(job, JobStatus.COMPLETED)
            return
        job.error = self._classify(error) if isinstance(error, Exception) else None
        self._finish(job, JobStatus.FAILED)
        log.warning("generate job %s failed: %s", job.request_id, job.error.message if job.error else error)

    def _finish(self, job: GenerateJob, status: JobStatus) -> None:
        job.status = status
        job.finished_at = self._clock()

    def _forget_expired(self) -> None:
        now = self._clock()
        for request_id in [
            request_id
            for request_id, job in self._jobs.items()
            if job.finished_at is not None and now - job.finished_at >= self._ttl_seconds
        ]:
            del self._jobs[request_id]
