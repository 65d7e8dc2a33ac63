"""Artifact and validation callbacks: the durable store (a real SQLite file) and its sender against a real HTTP
receiver on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import pytest
from aiohttp import web

from engine_ext.consensus.artifact import decode_vector
from server.poc.batches.artifacts import ArtifactBatch
from server.poc.batches.callback_url import callback_url_problem
from server.poc.delivery.callback_sender import IDEMPOTENCY_HEADER, CallbackSender, GiveUpReason
from server.poc.delivery.callback_store import CallbackStore, EntryState, RoundCounts
from server.poc.delivery.callbacks import ArtifactCallback, CallbackIdentity
from server.poc.delivery.retry import RetrySchedule
from server.poc.delivery.store_lock import StoreInUse, StoreLock
from server.poc.delivery.validated import validated_url

K = 12
IDENTITY = CallbackIdentity(public_key="pk-1", block_hash="0xabc", block_height=123, node_id=2)
FAST = RetrySchedule(first_delay=0.001, factor=2.0, max_delay=0.004, attempts=10, attempt_timeout=10.0)
SLOW = RetrySchedule(first_delay=60.0, attempts=10)  # a close bound always cuts its retries short
GUARD_SECONDS = 30  # only a hang guard: every wait below ends on an event long before this
ROUND = "round-1"


def batch_of(sequence: int, nonces: list[int]) -> ArtifactBatch:
    rows = np.array([[nonce % 1000 + position / 8 for position in range(K)] for nonce in nonces], dtype="<f2")
    return ArtifactBatch(sequence, tuple(nonces), rows.tobytes(), K)


class Receiver:
    """The API node's callback endpoints: records each request, answers with the queued statuses, then 200."""

    def __init__(self, statuses: list[int] | None = None, always: int | None = None) -> None:
        self.statuses = list(statuses or [])
        self.always = always
        self.requests: list[tuple[str, dict[str, Any], int, str | None]] = []  # answered: path, body, status, key
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
        return [body for path, body, status, _ in self.requests if path == kind and status < 400]

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
            self.requests.append((request.match_info["kind"], body, status, request.headers.get(IDEMPOTENCY_HEADER)))
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


def open_store(path: Path) -> CallbackStore:
    return CallbackStore(StoreLock.claim(path))


def sender_of(
    store: CallbackStore, session: aiohttp.ClientSession, retry: RetrySchedule = FAST, **options: Any
) -> CallbackSender:
    options.setdefault("interval_seconds", 0.05)
    return CallbackSender(store, session, retry, **options)


def add(callback: ArtifactCallback, batch: ArtifactBatch) -> None:
    callback.add(batch.nonces, batch.vectors)


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


def states(path: Path) -> list[tuple[int, str]]:
    with sqlite3.connect(path) as db:
        return db.execute("SELECT id, state FROM callbacks ORDER BY id").fetchall()


def test_a_rounds_buffered_batches_go_in_one_body_of_the_deployed_shape_with_an_idempotency_key(tmp_path: Path) -> None:
    async def scenario() -> None:
        receiver = Receiver()
        url = await receiver.start()
        store = open_store(tmp_path / "callbacks.sqlite3")
        async with aiohttp.ClientSession() as session:
            sender = sender_of(store, session)
            callback = ArtifactCallback(url, IDENTITY, K, ROUND, store, sender.flush)
            first, second = batch_of(1, [17, 18]), batch_of(2, [40])
            add(callback, first)
            add(callback, second)  # both before the sender starts: one body
            sender.start()
            await receiver.wait_until(lambda: len(receiver.requests) == 1)
            assert callback.counts() == RoundCounts(delivered=3, pending=0, retrying=0, given_up=0, failed_attempts=0)
            await sender.close(GUARD_SECONDS)
        await receiver.stop()
        [(path, body, _, key)] = receiver.requests
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
        # The store's id, then the POST's first entry.
        assert key == f"{store.store_id}-1"
        # Delivered is a state change: the entries stay, with their ids.
        assert states(tmp_path / "callbacks.sqlite3") == [(1, "delivered"), (2, "delivered")]

    asyncio.run(scenario())


def test_a_receiver_failing_twice_gets_the_same_body_and_key_again_then_every_artifact_once(tmp_path: Path) -> None:
    async def scenario() -> None:
        receiver = Receiver(statuses=[503, 503])
        url = await receiver.start()
        store = open_store(tmp_path / "callbacks.sqlite3")
        async with aiohttp.ClientSession() as session:
            sender = sender_of(store, session)
            callback = ArtifactCallback(url, IDENTITY, K, ROUND, store, sender.flush)
            sender.start()
            receiver.release.clear()
            add(callback, batch_of(1, [1, 2, 3]))
            callback.finish()
            await receiver.wait_until(lambda: receiver.arrivals == 1)  # the first body is held at the receiver
            add(callback, batch_of(2, [4, 5]))  # arrives while the first body is still being tried
            receiver.release.set()
            await receiver.wait_until(lambda: len(receiver.accepted("generated")) == 1)
            add(callback, batch_of(3, [6]))
            callback.finish()
            await receiver.wait_until(lambda: sorted(receiver.accepted_nonces()) == [1, 2, 3, 4, 5, 6])
            counts = callback.counts()
            await sender.close(GUARD_SECONDS)
        await receiver.stop()
        assert [status for _, _, status, _ in receiver.requests][:3] == [503, 503, 200]
        assert [len(body["artifacts"]) for _, body, _, _ in receiver.requests][:3] == [3, 3, 3]  # the same body retried
        assert len({key for _, _, _, key in receiver.requests[:3]}) == 1  # ... with the same key
        assert len({key for _, _, _, key in receiver.requests}) == len(receiver.requests) - 2  # later bodies: new keys
        assert sorted(receiver.accepted_nonces()) == [1, 2, 3, 4, 5, 6]
        assert counts == RoundCounts(delivered=6, pending=0, retrying=0, given_up=0, failed_attempts=2)
        assert sender.failed_attempts == 2

    asyncio.run(scenario())


def test_a_4xx_gives_the_body_up_at_once_with_a_log_line_and_a_count(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> None:
        receiver = Receiver(always=400)
        url = await receiver.start()
        store = open_store(tmp_path / "callbacks.sqlite3")
        async with aiohttp.ClientSession() as session:
            sender = sender_of(store, session)
            callback = ArtifactCallback(url, IDENTITY, K, ROUND, store, sender.flush)
            add(callback, batch_of(1, [7, 8, 9]))
            sender.start()
            await receiver.wait_until(lambda: len(receiver.requests) == 1)
            await asyncio.sleep(0.2)  # several intervals: nothing more is sent
            counts = callback.counts()
            await sender.close(GUARD_SECONDS)
        await receiver.stop()
        assert len(receiver.requests) == 1
        assert counts == RoundCounts(delivered=0, pending=0, retrying=0, given_up=3, failed_attempts=1)
        assert (
            sender.given_up_entries[GiveUpReason.REJECTED] == 1
            and sender.given_up_artifacts[GiveUpReason.REJECTED] == 3
        )

    with caplog.at_level(logging.WARNING, logger="server.poc"):
        asyncio.run(scenario())
    assert any("given up (rejected)" in record.message and "HTTP 400" in record.message for record in caplog.records)


def test_a_body_whose_whole_schedule_failed_is_kept_and_delivered_in_a_later_pass(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> None:
        schedule = RetrySchedule(first_delay=0.001, max_delay=0.002, attempts=3)
        receiver = Receiver(statuses=[503] * schedule.attempts)
        url = await receiver.start()
        store = open_store(tmp_path / "callbacks.sqlite3")
        async with aiohttp.ClientSession() as session:
            sender = sender_of(store, session, schedule, pass_delay_seconds=0.3)
            callback = ArtifactCallback(url, IDENTITY, K, ROUND, store, sender.flush)
            add(callback, batch_of(1, [7, 8]))
            sender.start()
            await receiver.wait_until(lambda: len(receiver.requests) == schedule.attempts)
            await asyncio.sleep(0.05)
            between_passes = callback.counts()
            await receiver.wait_until(lambda: len(receiver.accepted("generated")) == 1)
            after = callback.counts()
            await sender.close(GUARD_SECONDS)
        await receiver.stop()
        assert between_passes == RoundCounts(delivered=0, pending=0, retrying=2, given_up=0, failed_attempts=3)
        assert after == RoundCounts(delivered=2, pending=0, retrying=0, given_up=0, failed_attempts=3)
        assert len({key for *_, key in receiver.requests}) == 1

    with caplog.at_level(logging.WARNING, logger="server.poc"):
        asyncio.run(scenario())
    failures = [record.message for record in caplog.records if "failed: HTTP 503" in record.message]
    assert len(failures) == 3  # every failed attempt is logged
    assert any("whole retry schedule failed" in record.message for record in caplog.records)


def test_an_entry_older_than_the_give_up_age_is_given_up_not_sent(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> None:
        receiver = Receiver()
        url = await receiver.start()
        now = [1_000_000.0]
        store = CallbackStore(StoreLock.claim(tmp_path / "callbacks.sqlite3"), clock=lambda: now[0])
        async with aiohttp.ClientSession() as session:
            sender = sender_of(store, session, give_up_after_seconds=86400, clock=lambda: now[0])
            old = ArtifactCallback(url, IDENTITY, K, "old-round", store, sender.flush)
            add(old, batch_of(1, [1, 2]))
            now[0] += 86400 + 1
            fresh = ArtifactCallback(url, IDENTITY, K, "fresh-round", store, sender.flush)
            add(fresh, batch_of(1, [3]))
            sender.start()
            await receiver.wait_until(lambda: len(receiver.requests) == 1)
            await sender.close(GUARD_SECONDS)
        await receiver.stop()
        assert receiver.accepted_nonces() == [3]
        assert sender.given_up_artifacts[GiveUpReason.EXPIRED] == 2

    with caplog.at_level(logging.ERROR, logger="server.poc"):
        asyncio.run(scenario())
    assert any("given up (expired)" in record.message for record in caplog.records)


def test_poisoned_entries_are_given_up_alone_and_hold_up_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A stored URL no client could send any more (http://[::1 raised ValueError out of the old start-up
    delivery, which then delivered nothing behind it) and a body that is not JSON, both before good entries."""

    async def scenario() -> None:
        receiver = Receiver()
        url = await receiver.start()
        path = tmp_path / "callbacks.sqlite3"
        store = open_store(path)
        async with aiohttp.ClientSession() as session:
            sender = sender_of(store, session)
            store.append("http://[::1/generated", {"artifacts": [{"nonce": 1, "vector_b64": "AAA="}]}, ROUND, 1)
            poisoned = ArtifactCallback(url, IDENTITY, K, ROUND, store, sender.flush)
            add(poisoned, batch_of(1, [2]))
            with sqlite3.connect(path) as db:
                db.execute("UPDATE callbacks SET body = '{\"artifacts\": [tor' WHERE id = 2")
            add(poisoned, batch_of(2, [3, 4]))
            add(poisoned, batch_of(3, [5]))
            store.append(validated_url(url), validated_body("after"), None, 0)
            sender.start()
            await receiver.wait_until(lambda: len(receiver.requests) == 2)
            await sender.close(GUARD_SECONDS)
        await receiver.stop()
        assert receiver.accepted_nonces() == [3, 4, 5]
        assert [body["request_id"] for body in receiver.accepted("validated")] == ["after"]
        assert sender.given_up_entries[GiveUpReason.UNSENDABLE] == 2
        assert states(path) == [(1, "given_up"), (2, "given_up"), (3, "delivered"), (4, "delivered"), (5, "delivered")]

    with caplog.at_level(logging.ERROR, logger="server.poc"):
        asyncio.run(scenario())
    messages = [record.message for record in caplog.records]
    assert any("given up (unsendable)" in message and "Invalid IPv6 URL" in message for message in messages), messages
    assert any("given up (unsendable)" in message and "unreadable" in message for message in messages), messages


def test_a_dead_receiver_holds_up_no_other_receiver(tmp_path: Path) -> None:
    async def scenario() -> None:
        dead = await down_url()
        receiver = Receiver()
        url = await receiver.start()
        store = open_store(tmp_path / "callbacks.sqlite3")
        async with aiohttp.ClientSession() as session:
            sender = sender_of(store, session, SLOW)
            add(ArtifactCallback(dead, IDENTITY, K, "to-dead", store, sender.flush), batch_of(1, [1]))
            add(ArtifactCallback(url, IDENTITY, K, "to-live", store, sender.flush), batch_of(1, [2]))
            sender.start()
            await receiver.wait_until(lambda: receiver.accepted_nonces() == [2])
            await sender.close(0.05)
        await receiver.stop()

    asyncio.run(scenario())


def test_a_receiver_that_never_answers_costs_one_schedule_a_pass_not_one_per_post(tmp_path: Path) -> None:
    """Before, a down receiver held every later entry behind each one's whole schedule (about 151 s each)."""

    async def scenario() -> None:
        schedule = RetrySchedule(first_delay=0.001, max_delay=0.002, attempts=3)
        url = await down_url()
        store = open_store(tmp_path / "callbacks.sqlite3")
        async with aiohttp.ClientSession() as session:
            sender = sender_of(store, session, schedule, pass_delay_seconds=0.5)
            for round_id in ("a", "b", "c"):  # three rounds: three POSTs to one URL
                add(ArtifactCallback(url, IDENTITY, K, round_id, store, sender.flush), batch_of(1, [ord(round_id)]))
            sender.start()
            await asyncio.wait_for(_until(lambda: sender.failed_attempts == schedule.attempts), GUARD_SECONDS)
            await asyncio.sleep(0.1)
            assert sender.failed_attempts == schedule.attempts  # the other two were not tried in this pass
            assert [store.round_counts(round_id).retrying for round_id in "abc"] == [1, 1, 1]
            receiver = Receiver()
            await receiver.start(port_of(url))
            await receiver.wait_until(lambda: sorted(receiver.accepted_nonces()) == [ord("a"), ord("b"), ord("c")])
            await sender.close(GUARD_SECONDS)
        await receiver.stop()

    asyncio.run(scenario())


def test_what_is_left_at_close_is_delivered_by_the_next_start_with_the_same_key(tmp_path: Path) -> None:
    async def scenario() -> None:
        path = tmp_path / "state" / "callbacks.sqlite3"
        url = await down_url()
        store = open_store(path)
        async with aiohttp.ClientSession() as session:
            sender = sender_of(store, session, SLOW)
            callback = ArtifactCallback(url, IDENTITY, K, ROUND, store, sender.flush)
            add(callback, batch_of(1, [1, 2]))
            sender.start()
            await asyncio.wait_for(_until(lambda: sender.failed_attempts >= 1), GUARD_SECONDS)
            add(callback, batch_of(2, [3]))  # waiting behind the body in retry
            counts = callback.counts()
            await sender.close(0.05)
        store.close()
        assert counts == RoundCounts(delivered=0, pending=3, retrying=0, given_up=0, failed_attempts=1)
        assert states(path) == [(1, "pending"), (2, "pending")]

        # The next start: the store reopened, the receiver back on the same address.
        receiver = Receiver()
        await receiver.start(port_of(url))
        reopened = open_store(path)
        async with aiohttp.ClientSession() as session:
            sender = sender_of(reopened, session)
            sender.start()
            await receiver.wait_until(lambda: sorted(receiver.accepted_nonces()) == [1, 2, 3])
            await sender.close(GUARD_SECONDS)
        await receiver.stop()
        # The body tried before the close is sent again as it was, under its key; the one never tried is new.
        assert [(len(body["artifacts"]), key) for _, body, _, key in receiver.requests] == [
            (2, f"{reopened.store_id}-1"),
            (1, f"{reopened.store_id}-2"),
        ]
        assert receiver.accepted("generated")[0]["encoding"] == {"dtype": "f16", "k_dim": 12, "endian": "le"}
        assert states(path) == [(1, "delivered"), (2, "delivered")]

    asyncio.run(scenario())


def test_a_close_right_after_a_flush_request_returns(tmp_path: Path) -> None:
    """A round's end asks for a flush just before the server's shutdown closes the sender (a SIGTERM during a
    round): the close must not wait on a main loop that took the flush instead of the cancellation."""

    async def scenario() -> None:
        url = await down_url()
        store = open_store(tmp_path / "callbacks.sqlite3")
        async with aiohttp.ClientSession() as session:
            sender = sender_of(store, session, SLOW, interval_seconds=60.0)
            sender.start()
            await asyncio.sleep(0.01)  # the main loop waits for a flush request
            store.append(url + "/generated", {"artifacts": []}, ROUND, 0)
            sender.flush()
            await asyncio.wait_for(sender.close(0.05), GUARD_SECONDS)

    asyncio.run(scenario())


def test_validation_results_are_posted_alone_in_the_deployed_shape(tmp_path: Path) -> None:
    async def scenario() -> None:
        receiver = Receiver(statuses=[503])
        url = await receiver.start()
        store = open_store(tmp_path / "callbacks.sqlite3")
        async with aiohttp.ClientSession() as session:
            sender = sender_of(store, session, interval_seconds=60.0)
            sender.start()
            store.append(validated_url(url), validated_body("req-1"), None, 0)
            store.append(validated_url(url), validated_body("req-2"), None, 0)
            sender.flush()  # at once, not at the next interval
            await receiver.wait_until(lambda: len(receiver.accepted("validated")) == 2)
            await sender.close(GUARD_SECONDS)
        await receiver.stop()
        assert receiver.accepted("validated") == [validated_body("req-1"), validated_body("req-2")]
        assert [status for _, _, status, _ in receiver.requests] == [503, 200, 200]

    asyncio.run(scenario())


def test_ids_only_grow_and_settled_entries_are_purged_later(tmp_path: Path) -> None:
    path = tmp_path / "callbacks.sqlite3"
    now = [100.0]
    store = CallbackStore(StoreLock.claim(path), clock=lambda: now[0])
    first = store.append("http://127.0.0.1:1/generated", {"artifacts": []}, ROUND, 0)
    [post] = store.due_posts("http://127.0.0.1:1/generated", now[0], 10, lambda body: True)
    store.settle(post, EntryState.DELIVERED, "HTTP 200")
    now[0] += 10
    assert store.purge_settled(now[0] - 5) == 1
    second = store.append("http://127.0.0.1:1/generated", {"artifacts": []}, ROUND, 0)
    store.close()
    assert second > first  # never reused, even after the purge emptied the table


def test_one_server_per_store(tmp_path: Path) -> None:
    path = tmp_path / "callbacks.sqlite3"
    held = StoreLock.claim(path)
    with pytest.raises(StoreInUse, match="in use by another server"):
        StoreLock.claim(path)
    held.release()
    StoreLock.claim(path).release()


def test_a_file_that_is_no_store_is_refused_with_its_name(tmp_path: Path) -> None:
    from server.poc.delivery.callback_store import StoreUnreadable

    path = tmp_path / "callbacks.sqlite3"
    path.write_bytes(b"not a database at all, but long enough to have a header" * 20)
    with pytest.raises(StoreUnreadable, match=str(path)):
        open_store(path)


@pytest.mark.parametrize(
    "url",
    [
        "http://",
        "http:///generated",
        "http://[::1",
        "http://127.0.0.1:99999",
        "http://127.0.0.1:0",
        "http://127.0.0.1:8080/x\nINFO forged log line",
        "ftp://127.0.0.1/",
        "http://127.0.0.1/p?q=1",
        "http://h:abc",
    ],
)
def test_malformed_callback_urls_have_a_problem(url: str) -> None:
    assert callback_url_problem(url) is not None


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:9100/v2/poc-batches/Qwen%252FQwen3-8B", "https://[::1]:8443", "http://node.example"]
)
def test_usable_callback_urls_have_none(url: str) -> None:
    assert callback_url_problem(url) is None


def test_the_retry_schedule_is_the_deployed_one() -> None:
    assert list(RetrySchedule().delays()) == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0, 30.0]


def test_the_stored_body_is_json_as_posted(tmp_path: Path) -> None:
    store = open_store(tmp_path / "callbacks.sqlite3")
    store.append("http://127.0.0.1:1/validated", validated_body("x"), None, 0)
    store.close()
    with sqlite3.connect(tmp_path / "callbacks.sqlite3") as db:
        [(body,)] = db.execute("SELECT body FROM callbacks").fetchall()
    assert json.loads(body) == validated_body("x")


async def _until(condition: Callable[[], bool]) -> None:
    while not condition():
        await asyncio.sleep(0.001)
