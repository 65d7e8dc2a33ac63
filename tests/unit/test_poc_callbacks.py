"""Artifact and validation callbacks against a real HTTP receiver on 127.0.0.1, and the spool that keeps
what the process could not deliver."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import pytest
from aiohttp import web

from engine_ext.consensus.artifact import decode_vector
from server.poc.artifacts import ArtifactBatch
from server.poc.callbacks import ArtifactCallback, CallbackIdentity, DeliveryCounts
from server.poc.deliveries import CallbackDeliveries, ValidatedCounts
from server.poc.retry import PostOutcome, RetrySchedule
from server.poc.spool import Spool, SpoolCounts, SpoolReport

K = 12
IDENTITY = CallbackIdentity(public_key="pk-1", block_hash="0xabc", block_height=123, node_id=2)
FAST = RetrySchedule(first_delay=0.001, factor=2.0, max_delay=0.004, attempts=10, attempt_timeout=10.0)
SLOW = RetrySchedule(first_delay=60.0, attempts=10)  # a close bound always cuts its retries short
GUARD_SECONDS = 30  # only a hang guard: every wait below ends on an event long before this


def batch_of(sequence: int, nonces: list[int]) -> ArtifactBatch:
    rows = np.array([[nonce % 1000 + position / 8 for position in range(K)] for nonce in nonces], dtype="<f2")
    return ArtifactBatch(sequence, tuple(nonces), rows.tobytes(), K)


class Receiver:
    """The API node's callback endpoints: records each request, answers with the queued statuses, then 200."""

    def __init__(self, statuses: list[int] | None = None, always: int | None = None) -> None:
        self.statuses = list(statuses or [])
        self.always = always
        self.requests: list[tuple[str, dict[str, Any], int]] = []  # answered requests
        self.arrivals = 0  # requests received, answered or held
        self.release = asyncio.Event()  # cleared by a test to hold requests until it says so
        self.release.set()
        self._changed = asyncio.Condition()
        self._runner: web.AppRunner | None = None

    async def start(self, port: int = 0) -> str:
        app = web.Application()
        app.router.add_post("/poc/{kind}", self._handle)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", port).start()
        host, bound_port = self._runner.addresses[0][:2]
        return f"http://{host}:{bound_port}/poc"

    async def stop(self) -> None:
        assert self._runner is not None
        await self._runner.cleanup()

    def accepted(self, kind: str) -> list[dict[str, Any]]:
        return [body for path, body, status in self.requests if path == kind and status < 400]

    def accepted_nonces(self) -> list[int]:
        return [artifact["nonce"] for body in self.accepted("generated") for artifact in body["artifacts"]]

    async def wait_until(self, condition: Callable[[], bool]) -> None:
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(condition), GUARD_SECONDS)

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        async with self._changed:
            self.arrivals += 1
            self._changed.notify_all()
        await self.release.wait()
        status = self.statuses.pop(0) if self.statuses else (self.always or 200)
        async with self._changed:
            self.requests.append((request.match_info["kind"], body, status))
            self._changed.notify_all()
        return web.Response(status=status)


async def down_url() -> str:
    """A receiver URL where nothing listens (it was started to claim a port, then stopped)."""
    receiver = Receiver()
    url = await receiver.start()
    await receiver.stop()
    return url


def port_of(url: str) -> int:
    return int(url.split(":")[2].split("/")[0])


def validated_body(request_id: str) -> dict[str, Any]:
    return {
        "request_id": request_id,
        "block_hash": "0xabc",
        "block_height": 123,
        "public_key": "pk-9",
        "node_id": 2,
        "n_total": 200,
        "n_mismatch": 3,
        "mismatch_nonces": [4, 17, 99],
        "p_value": 0.42,
        "fraud_detected": False,
    }


def test_the_body_is_exactly_the_deployed_shape_with_all_buffered_artifacts_in_one_post(tmp_path: Path) -> None:
    async def scenario() -> None:
        receiver = Receiver()
        url = await receiver.start()
        async with aiohttp.ClientSession() as session:
            callback = ArtifactCallback(url, IDENTITY, K, Spool(tmp_path / "spool.jsonl"), session, 0.05, FAST)
            first, second = batch_of(1, [17, 18]), batch_of(2, [40])
            callback.add(first)
            callback.add(second)  # both before the first tick: one body
            callback.start()
            await receiver.wait_until(lambda: len(receiver.requests) == 1)
            await callback.close(GUARD_SECONDS)
        await receiver.stop()
        [(path, body, _)] = receiver.requests
        assert path == "generated"
        assert body == {
            "public_key": "pk-1",
            "block_hash": "0xabc",
            "block_height": 123,
            "node_id": 2,
            "artifacts": [
                {"nonce": 17, "vector_b64": first.vector_b64(0)},
                {"nonce": 18, "vector_b64": first.vector_b64(1)},
                {"nonce": 40, "vector_b64": second.vector_b64(0)},
            ],
            "encoding": {"dtype": "f16", "k_dim": 12, "endian": "le"},
        }
        expected = np.frombuffer(first.vectors, dtype="<f2").reshape(2, K)[1]
        np.testing.assert_array_equal(decode_vector(body["artifacts"][1]["vector_b64"], K), expected)
        assert callback.counts() == DeliveryCounts(3, 0, 0, 0, 0)
        assert not (tmp_path / "spool.jsonl").exists()

    asyncio.run(scenario())


def test_a_receiver_failing_twice_then_recovering_gets_every_artifact_exactly_once(tmp_path: Path) -> None:
    async def scenario() -> None:
        receiver = Receiver(statuses=[503, 503])
        url = await receiver.start()
        async with aiohttp.ClientSession() as session:
            callback = ArtifactCallback(url, IDENTITY, K, Spool(tmp_path / "spool.jsonl"), session, 0.05, FAST)
            callback.start()
            receiver.release.clear()
            callback.add(batch_of(1, [1, 2, 3]))
            await receiver.wait_until(lambda: receiver.arrivals == 1)  # the first body is held at the receiver
            callback.add(batch_of(2, [4, 5]))  # arrives while the first body is still being tried
            receiver.release.set()
            await receiver.wait_until(lambda: len(receiver.accepted("generated")) == 1)
            callback.add(batch_of(3, [6]))
            await receiver.wait_until(lambda: sorted(receiver.accepted_nonces()) == [1, 2, 3, 4, 5, 6])
            await callback.close(GUARD_SECONDS)
        await receiver.stop()
        assert [status for _, _, status in receiver.requests][:3] == [503, 503, 200]
        assert [len(body["artifacts"]) for _, body, _ in receiver.requests][:3] == [3, 3, 3]  # the same body retried
        assert sorted(receiver.accepted_nonces()) == [1, 2, 3, 4, 5, 6]
        assert callback.counts() == DeliveryCounts(6, 0, 0, 0, 2)

    asyncio.run(scenario())


def test_a_body_refused_through_the_whole_schedule_is_given_up_and_counted(tmp_path: Path) -> None:
    async def scenario() -> None:
        receiver = Receiver(always=503)
        url = await receiver.start()
        schedule = RetrySchedule(first_delay=0.001, max_delay=0.002, attempts=4)
        async with aiohttp.ClientSession() as session:
            callback = ArtifactCallback(url, IDENTITY, K, Spool(tmp_path / "spool.jsonl"), session, 60.0, schedule)
            callback.start()
            callback.add(batch_of(1, [7, 8, 9]))
            await callback.close(GUARD_SECONDS)  # finishing sends at once; the schedule ends well inside the bound
        await receiver.stop()
        assert len(receiver.requests) == 4
        assert callback.counts() == DeliveryCounts(0, 0, 0, 3, 4)
        assert not (tmp_path / "spool.jsonl").exists()

    asyncio.run(scenario())


def test_a_body_that_never_reaches_the_receiver_is_spooled_not_dropped(tmp_path: Path) -> None:
    async def scenario() -> None:
        url = await down_url()
        spool = Spool(tmp_path / "spool.jsonl")
        schedule = RetrySchedule(first_delay=0.001, max_delay=0.002, attempts=3)
        async with aiohttp.ClientSession() as session:
            callback = ArtifactCallback(url, IDENTITY, K, spool, session, 60.0, schedule)
            callback.add(batch_of(1, [7, 8]))
            await callback.close(GUARD_SECONDS)
        assert callback.counts() == DeliveryCounts(0, 0, 2, 0, 3)
        [entry] = spool.read().entries
        assert entry.url == url + "/generated"
        assert [artifact["nonce"] for artifact in entry.body["artifacts"]] == [7, 8]

    asyncio.run(scenario())


def test_receiver_down_at_close_then_the_next_start_delivers_the_spool(tmp_path: Path) -> None:
    async def scenario() -> None:
        path = tmp_path / "state" / "spool.jsonl"
        url = await down_url()
        async with aiohttp.ClientSession() as session:
            callback = ArtifactCallback(url, IDENTITY, K, Spool(path), session, 0.01, SLOW)
            callback.start()
            callback.add(batch_of(1, [1, 2]))
            await asyncio.wait_for(_until(lambda: callback.counts().failed_attempts >= 1), GUARD_SECONDS)
            callback.add(batch_of(2, [3]))  # waiting behind the body in retry
            await callback.close(0.05)
        assert callback.counts() == DeliveryCounts(0, 0, 3, 0, 1)
        lines = path.read_text().splitlines()
        assert len(lines) == 1 and json.loads(lines[0])["url"] == url + "/generated"

        # The next start: a fresh Spool on the same file, the receiver back on the same address.
        receiver = Receiver()
        await receiver.start(port_of(url))
        next_spool = Spool(path)
        async with aiohttp.ClientSession() as session:
            report = await next_spool.deliver_all(session, FAST)
        await receiver.stop()
        assert report == SpoolReport(delivered=1, remaining=0, given_up=0, unreadable_dropped=0)
        assert receiver.accepted_nonces() == [1, 2, 3]
        assert receiver.accepted("generated")[0]["encoding"] == {"dtype": "f16", "k_dim": 12, "endian": "le"}
        assert not path.exists()
        assert next_spool.counts().delivered == 1

    asyncio.run(scenario())


def test_a_close_cancelled_while_it_waits_still_spools_what_was_unsettled(tmp_path: Path) -> None:
    async def scenario() -> None:
        url = await down_url()
        spool = Spool(tmp_path / "spool.jsonl")
        async with aiohttp.ClientSession() as session:
            callback = ArtifactCallback(url, IDENTITY, K, spool, session, 60.0, SLOW)
            callback.add(batch_of(1, [1, 2]))
            closing = asyncio.create_task(callback.close(GUARD_SECONDS))
            await asyncio.wait_for(_until(lambda: callback.counts().failed_attempts == 1), GUARD_SECONDS)
            closing.cancel()  # the process is going down harder than the flush bound
            with pytest.raises(asyncio.CancelledError):
                await closing
        assert callback.counts() == DeliveryCounts(0, 0, 2, 0, 1)
        [entry] = spool.read().entries
        assert [artifact["nonce"] for artifact in entry.body["artifacts"]] == [1, 2]

    asyncio.run(scenario())


def test_the_spool_survives_a_torn_line_and_sorts_refused_from_unreachable(tmp_path: Path) -> None:
    async def scenario() -> None:
        path = tmp_path / "spool.jsonl"
        receiver = Receiver(statuses=[200] + [400] * FAST.attempts)
        url = await receiver.start()
        down = await down_url()
        spool = Spool(path)
        spool.append(f"{url}/validated", {"request_id": "delivered"})
        with open(path, "ab") as spool_file:
            spool_file.write(b'{"id": "torn", "url": "http://')  # a crash mid-append
        spool.append(f"{url}/validated", {"request_id": "refused"})
        spool.append(f"{down}/validated", {"request_id": "unreachable"})
        spool.append(f"{url}/validated", {"request_id": "other-receiver"})
        spool.append(f"{down}/generated", {"request_id": "same-down-receiver"})
        contents = spool.read()
        assert [entry.body["request_id"] for entry in contents.entries] == [
            "delivered", "refused", "unreachable", "other-receiver", "same-down-receiver"
        ]
        assert contents.unreadable_lines == 1
        async with aiohttp.ClientSession() as session:
            report = await spool.deliver_all(session, FAST)
        await receiver.stop()
        assert report == SpoolReport(delivered=2, remaining=2, given_up=1, unreadable_dropped=1)
        assert [entry.body["request_id"] for entry in spool.read().entries] == ["unreachable", "same-down-receiver"]
        assert spool.read().unreadable_lines == 0
        assert [body["request_id"] for body in receiver.accepted("validated")] == ["delivered", "other-receiver"]
        assert spool.counts() == SpoolCounts(spooled=5, delivered=2, given_up=1)

    asyncio.run(scenario())


def test_validated_results_are_posted_in_the_deployed_shape(tmp_path: Path) -> None:
    async def scenario() -> None:
        receiver = Receiver(statuses=[503])
        url = await receiver.start()
        async with aiohttp.ClientSession() as session:
            deliveries = CallbackDeliveries(session, Spool(tmp_path / "spool.jsonl"), FAST)
            outcome = await deliveries.post_validated(url, validated_body("req-1"))
            with pytest.raises(ValueError, match="p_value"):
                deliveries.post_validated(url, {k: v for k, v in validated_body("bad").items() if k != "p_value"})
            await deliveries.close(GUARD_SECONDS)
        await receiver.stop()
        assert outcome is PostOutcome.DELIVERED
        assert receiver.accepted("validated") == [validated_body("req-1")]
        assert deliveries.validated_counts() == ValidatedCounts(1, 0, 0, 0, 1)

    asyncio.run(scenario())


def test_closing_the_deliveries_spools_everything_still_in_flight(tmp_path: Path) -> None:
    async def scenario() -> None:
        url = await down_url()
        spool = Spool(tmp_path / "spool.jsonl")
        async with aiohttp.ClientSession() as session:
            deliveries = CallbackDeliveries(session, spool, SLOW, interval_seconds=60.0)
            callback = deliveries.artifact_callback(url, IDENTITY, K)
            callback.add(batch_of(1, [5, 6, 7]))
            deliveries.post_validated(url, validated_body("req-2"))
            await deliveries.close(0.05)
            with pytest.raises(RuntimeError):
                deliveries.post_validated(url, validated_body("late"))
        assert callback.counts().spooled_artifacts == 3
        assert deliveries.validated_counts() == ValidatedCounts(0, 0, 1, 0, 1)
        by_url = {entry.url: entry.body for entry in spool.read().entries}
        assert by_url[url + "/validated"] == validated_body("req-2")
        assert [artifact["nonce"] for artifact in by_url[url + "/generated"]["artifacts"]] == [5, 6, 7]

    asyncio.run(scenario())


def test_the_retry_schedule_is_the_deployed_one() -> None:
    assert list(RetrySchedule().delays()) == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0, 30.0]


async def _until(condition: Callable[[], bool]) -> None:
    while not condition():
        await asyncio.sleep(0.001)
