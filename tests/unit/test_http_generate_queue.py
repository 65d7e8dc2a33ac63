"""The generate queue alone (server.http.generate_queue), with scripted jobs: one at a time in arrival order, each
after the mining round has ended, readable for the TTL after it finished and not after, cancelled whole by
cancel_all (the queued jobs and the running one), and bounded at 100 000 nonces (429)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import grpc
import pytest

from server.core.errors import Reason, ServiceError
from server.http.errors import HttpError
from server.http.generate_queue import FINISHED_KEPT_SECONDS, GenerateQueue, JobStatus, JobWork
from server.http.pow_requests import MAX_QUEUED_NONCES


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Harness:
    """The queue with a round that can be held active, and a record of what ran and when the node computed."""

    def __init__(self) -> None:
        self.clock = Clock()
        self.idle = asyncio.Event()
        self.idle.set()
        self.events: list[str] = []
        self.computing_now = 0
        self.queue = GenerateQueue(self._wait_idle, self._computing, self._classify, clock=self.clock)

    async def _wait_idle(self) -> None:
        await self.idle.wait()

    @contextmanager
    def _computing(self) -> Iterator[None]:
        self.computing_now += 1
        try:
            yield
        finally:
            self.computing_now -= 1

    @staticmethod
    def _classify(error: Exception) -> ServiceError:
        assert isinstance(error, ServiceError)
        return error

    def job(self, name: str, release: asyncio.Event | None = None) -> JobWork:
        async def work() -> dict[str, Any]:
            self.events.append(f"start {name} computing={self.computing_now}")
            if release is not None:
                await release.wait()
            self.events.append(f"end {name}")
            return {"name": name}

        return work


async def settle(queue: GenerateQueue, *request_ids: str) -> None:
    for _ in range(200):
        jobs = [queue.job(request_id) for request_id in request_ids]
        if all(job is not None and job.finished_at is not None for job in jobs):
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the jobs did not finish")


def test_jobs_run_one_at_a_time_in_arrival_order_and_keep_their_results() -> None:
    async def scenario() -> None:
        harness = Harness()
        release = asyncio.Event()
        harness.queue.submit("8080:a", 3, harness.job("a", release))
        harness.queue.submit("8080:b", 2, harness.job("b"))
        harness.queue.submit("8080:c", 1, harness.job("c"))
        await asyncio.sleep(0.05)
        # a runs and holds the worker; b and c wait behind it.
        assert harness.events == ["start a computing=1"]
        assert [harness.queue.job(f"8080:{n}").status for n in "abc"] == [  # type: ignore[union-attr]
            JobStatus.RUNNING,
            JobStatus.QUEUED,
            JobStatus.QUEUED,
        ]
        assert harness.queue.nonces_queued == 6
        release.set()
        await settle(harness.queue, "8080:a", "8080:b", "8080:c")
        assert harness.events == [
            "start a computing=1",
            "end a",
            "start b computing=1",
            "end b",
            "start c computing=1",
            "end c",
        ]
        for name in "abc":
            job = harness.queue.job(f"8080:{name}")
            assert job is not None and job.status is JobStatus.COMPLETED and job.result == {"name": name}
        assert harness.computing_now == 0 and harness.queue.nonces_queued == 0

    asyncio.run(scenario())


def test_a_job_waits_while_a_mining_round_is_active() -> None:
    async def scenario() -> None:
        harness = Harness()
        harness.idle.clear()  # a round mines
        harness.queue.submit("8080:a", 1, harness.job("a"))
        await asyncio.sleep(0.05)
        assert harness.events == [] and harness.queue.job("8080:a").status is JobStatus.QUEUED  # type: ignore[union-attr]
        assert harness.computing_now == 0
        harness.idle.set()  # the round ended
        await settle(harness.queue, "8080:a")
        assert harness.events == ["start a computing=1", "end a"]

    asyncio.run(scenario())


def test_a_finished_job_is_readable_for_the_ttl_then_forgotten() -> None:
    async def scenario() -> None:
        harness = Harness()
        harness.queue.submit("8080:a", 1, harness.job("a"))
        await settle(harness.queue, "8080:a")
        harness.clock.now += FINISHED_KEPT_SECONDS - 1
        assert harness.queue.job("8080:a") is not None
        harness.clock.now += 1
        assert harness.queue.job("8080:a") is None
        assert harness.queue.job("8080:never") is None

    asyncio.run(scenario())
    assert FINISHED_KEPT_SECONDS == 300


def test_cancel_all_cancels_the_queued_jobs_and_the_running_one() -> None:
    async def scenario() -> None:
        harness = Harness()
        never = asyncio.Event()
        harness.queue.submit("8080:a", 1, harness.job("a", never))
        harness.queue.submit("8080:b", 1, harness.job("b"))
        harness.queue.submit("8080:c", 1, harness.job("c"))
        await asyncio.sleep(0.05)
        assert await harness.queue.cancel_all() == 3
        # Answered once the running job has ended: every job is cancelled, nothing more runs.
        assert [harness.queue.job(f"8080:{n}").status for n in "abc"] == [JobStatus.CANCELLED] * 3  # type: ignore[union-attr]
        await asyncio.sleep(0.05)
        assert harness.events == ["start a computing=1"]
        assert harness.computing_now == 0 and harness.queue.nonces_queued == 0
        # The queue takes jobs again afterwards.
        harness.queue.submit("8080:d", 1, harness.job("d"))
        await settle(harness.queue, "8080:d")
        assert harness.queue.job("8080:d").status is JobStatus.COMPLETED  # type: ignore[union-attr]

    asyncio.run(scenario())


def test_a_job_that_raises_is_failed_with_its_classified_error_and_the_next_runs() -> None:
    async def scenario() -> None:
        harness = Harness()

        async def refused() -> dict[str, Any]:
            raise ServiceError(grpc.StatusCode.RESOURCE_EXHAUSTED, Reason.KV_BLOCKS_EXHAUSTED, "no blocks")

        harness.queue.submit("8080:a", 1, refused)
        harness.queue.submit("8080:b", 1, harness.job("b"))
        await settle(harness.queue, "8080:a", "8080:b")
        failed = harness.queue.job("8080:a")
        assert failed is not None and failed.status is JobStatus.FAILED and failed.result is None
        assert failed.error is not None and failed.error.reason_name == "KV_BLOCKS_EXHAUSTED"
        assert harness.queue.job("8080:b").status is JobStatus.COMPLETED  # type: ignore[union-attr]

    asyncio.run(scenario())


def test_the_queue_holds_at_most_100000_nonces_running_ones_included() -> None:
    async def scenario() -> None:
        harness = Harness()
        never = asyncio.Event()
        harness.queue.submit("8080:a", MAX_QUEUED_NONCES - 10, harness.job("a", never))
        await asyncio.sleep(0.02)
        harness.queue.submit("8080:b", 10, harness.job("b"))
        with pytest.raises(HttpError) as refused:
            harness.queue.submit("8080:c", 1, harness.job("c"))
        assert (refused.value.status, refused.value.error_type) == (429, "QUEUE_FULL")
        assert harness.queue.job("8080:c") is None
        await harness.queue.close()
        assert harness.queue.nonces_queued == 0

    asyncio.run(scenario())
