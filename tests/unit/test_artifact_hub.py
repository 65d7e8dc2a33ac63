"""The artifact hub: sequence numbering, fan-out, resuming, loss reports, round ends and retention."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import numpy as np
import pytest

from engine_ext.consensus.artifact import decode_vector
from server.poc.batches.artifacts import ArtifactBatch
from server.poc.fanout.artifact_hub import (
    ArtifactHub,
    BatchEvent,
    EndEvent,
    EndReason,
    HubEvent,
    HubShutDown,
    LostEvent,
    RoundClosed,
    RoundExists,
    RoundNotFound,
)

K = 12


def vectors_for(nonces: list[int], k: int = K) -> bytes:
    # Each value is derived from its nonce and position, so a row that lands in the wrong place shows.
    rows = np.array([[nonce % 1000 + position / 16 for position in range(k)] for nonce in nonces], dtype="<f2")
    return rows.tobytes()


def publish_batches(hub: ArtifactHub, round_id: str, sizes: list[int], first_nonce: int = 0) -> list[ArtifactBatch]:
    batches = []
    nonce = first_nonce
    for size in sizes:
        nonces = list(range(nonce, nonce + size))
        batches.append(hub.publish(round_id, nonces, vectors_for(nonces)))
        nonce += size
    return batches


async def collect(events: AsyncIterator[HubEvent]) -> list[HubEvent]:
    async with contextlib.aclosing(events) as stream:
        return [event async for event in stream]


def sequences_of(events: list[HubEvent]) -> list[int]:
    return [event.batch.sequence for event in events if isinstance(event, BatchEvent)]


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_batch_encodes_each_row_as_the_network_does() -> None:
    nonces = [17, -3, 2**31 - 1]
    batch = ArtifactBatch(1, tuple(nonces), vectors_for(nonces), K)
    expected_rows = np.frombuffer(vectors_for(nonces), dtype="<f2").reshape(3, K)
    for index in range(3):
        text = batch.vector_b64(index)
        assert len(text) == 32
        np.testing.assert_array_equal(decode_vector(text, K), expected_rows[index])
    with pytest.raises(IndexError):
        batch.vector_b64(3)
    with pytest.raises(ValueError, match="expected"):
        ArtifactBatch(1, (1, 2), vectors_for([1]), K)


def test_sequences_are_dense_from_one_and_counters_follow() -> None:
    hub = ArtifactHub(buffer_artifacts=100, retention_seconds=60)
    hub.open_round("r1", K)
    batches = publish_batches(hub, "r1", [3, 1, 4])
    assert [batch.sequence for batch in batches] == [1, 2, 3]
    assert [batch.nonces for batch in batches] == [(0, 1, 2), (3,), (4, 5, 6, 7)]
    stats = hub.stats("r1")
    assert (stats.batches_published, stats.artifacts_published, stats.last_sequence, stats.subscribers) == (3, 8, 3, 0)
    assert stats.end_reason is None
    hub.open_round("r2", K)
    assert hub.publish("r2", [9], vectors_for([9])).sequence == 1  # numbering is per round


def test_a_resuming_subscriber_gets_exactly_what_follows_its_sequence() -> None:
    async def scenario() -> None:
        hub = ArtifactHub(buffer_artifacts=1000, retention_seconds=60)
        hub.open_round("r", K)
        publish_batches(hub, "r", [2] * 5)
        first_part: list[int] = []
        async with contextlib.aclosing(hub.subscribe("r")) as stream:
            async for event in stream:
                assert isinstance(event, BatchEvent)
                first_part.append(event.batch.sequence)
                if len(first_part) == 3:
                    break  # the client disconnects after sequence 3
        publish_batches(hub, "r", [2] * 4, first_nonce=100)
        hub.close_round("r", EndReason.STOPPED)
        resumed = await collect(hub.subscribe("r", after_sequence=first_part[-1]))
        assert first_part + sequences_of(resumed) == list(range(1, 10))
        assert not any(isinstance(event, LostEvent) for event in resumed)
        assert resumed[-1] == EndEvent(EndReason.STOPPED, "", 9)

    asyncio.run(scenario())


def test_many_live_subscribers_each_get_every_batch_in_order() -> None:
    async def scenario() -> None:
        hub = ArtifactHub(buffer_artifacts=10_000, retention_seconds=60)
        hub.open_round("r", K)
        subscribers = [asyncio.create_task(collect(hub.subscribe(None))) for _ in range(20)]
        await asyncio.sleep(0)  # let each start waiting on the empty round
        assert hub.stats("r").subscribers == 20
        for size in range(1, 41):
            publish_batches(hub, "r", [size], first_nonce=size * 1000)
            if size % 7 == 0:
                await asyncio.sleep(0)  # some batches arrive while subscribers are mid-stream
        hub.close_round("r", EndReason.STOPPED, "requested")
        results = await asyncio.gather(*subscribers)
        for events in results:
            assert sequences_of(events) == list(range(1, 41))
            assert events[-1] == EndEvent(EndReason.STOPPED, "requested", 40)
        assert hub.stats("r").subscribers == 0

    asyncio.run(scenario())


def test_a_slow_subscriber_is_told_exactly_what_it_lost_and_never_slows_publishing() -> None:
    async def scenario() -> None:
        hub = ArtifactHub(buffer_artifacts=10, retention_seconds=60)
        hub.open_round("r", K)
        read_first = asyncio.Event()
        resume = asyncio.Event()
        slow_events: list[HubEvent] = []

        async def slow_subscriber() -> None:
            async with contextlib.aclosing(hub.subscribe("r")) as stream:
                async for event in stream:
                    slow_events.append(event)
                    if len(slow_events) == 1:
                        read_first.set()
                        await resume.wait()

        reader = asyncio.create_task(slow_subscriber())
        publish_batches(hub, "r", [4])
        await read_first.wait()
        # Sizes 3, 5, 2, 6, 4, 4: the 10-artifact buffer ends up holding sequences 6 and 7 only.
        publish_batches(hub, "r", [3, 5, 2, 6, 4, 4], first_nonce=100)
        stats = hub.stats("r")
        assert (stats.buffered_batches, stats.buffered_artifacts, stats.artifacts_published) == (2, 8, 28)
        hub.close_round("r", EndReason.STOPPED)
        resume.set()
        await reader
        assert slow_events[1] == LostEvent(2, 5, batches=4, artifacts=3 + 5 + 2 + 6)
        assert sequences_of(slow_events) == [1, 6, 7]
        assert slow_events[-1] == EndEvent(EndReason.STOPPED, "", 7)
        # A new subscriber asking from the start learns the same way what is gone.
        late = await collect(hub.subscribe("r"))
        assert late[0] == LostEvent(1, 5, batches=5, artifacts=4 + 3 + 5 + 2 + 6)
        assert sequences_of(late) == [6, 7]

    asyncio.run(scenario())


def test_the_newest_batch_stays_readable_even_when_larger_than_the_buffer() -> None:
    async def scenario() -> None:
        hub = ArtifactHub(buffer_artifacts=3, retention_seconds=60)
        hub.open_round("r", K)
        publish_batches(hub, "r", [2, 5])
        hub.close_round("r", EndReason.STOPPED)
        events = await collect(hub.subscribe("r"))
        assert events[0] == LostEvent(1, 1, batches=1, artifacts=2)
        assert sequences_of(events) == [2]

    asyncio.run(scenario())


def test_a_closed_round_stays_readable_until_its_retention_ends() -> None:
    async def scenario() -> None:
        clock = FakeClock()
        hub = ArtifactHub(buffer_artifacts=100, retention_seconds=30, clock=clock)
        hub.open_round("r", K)
        publish_batches(hub, "r", [2, 2])
        hub.close_round("r", EndReason.STOPPED)
        clock.now += 29.5
        events = await collect(hub.subscribe(None))
        assert sequences_of(events) == [1, 2] and events[-1] == EndEvent(EndReason.STOPPED, "", 2)
        assert hub.stats("r").end_reason is EndReason.STOPPED
        clock.now += 0.5
        for lookup in (lambda: hub.subscribe("r"), lambda: hub.subscribe(None), lambda: hub.stats("r")):
            with pytest.raises(RoundNotFound):
                lookup()
        assert hub.current_round_id() is None
        hub.open_round("r", K)  # the id is free again once dropped

    asyncio.run(scenario())


def test_a_subscriber_already_reading_keeps_its_round_after_retention() -> None:
    async def scenario() -> None:
        clock = FakeClock()
        hub = ArtifactHub(buffer_artifacts=100, retention_seconds=1, clock=clock)
        hub.open_round("r", K)
        publish_batches(hub, "r", [1, 1])
        stream = hub.subscribe("r")
        first = await anext(stream)
        hub.close_round("r", EndReason.STOPPED)
        clock.now += 5
        hub.drop_expired()
        rest = await collect(stream)
        assert sequences_of([first, *rest]) == [1, 2]
        assert rest[-1] == EndEvent(EndReason.STOPPED, "", 2)

    asyncio.run(scenario())


def test_end_reasons_reach_waiting_subscribers_and_the_first_reason_stands() -> None:
    async def scenario() -> None:
        hub = ArtifactHub(buffer_artifacts=100, retention_seconds=60)
        hub.open_round("failed", K)
        hub.open_round("running", K)
        waiting_failed = asyncio.create_task(collect(hub.subscribe("failed")))
        waiting_running = asyncio.create_task(collect(hub.subscribe("running")))
        await asyncio.sleep(0)
        publish_batches(hub, "running", [1])
        hub.close_round("failed", EndReason.FAILED, "engine died")
        hub.shutdown("server stopping")
        assert await waiting_failed == [EndEvent(EndReason.FAILED, "engine died", 0)]
        events = await waiting_running
        assert sequences_of(events) == [1]
        assert events[-1] == EndEvent(EndReason.SHUTTING_DOWN, "server stopping", 1)
        hub.close_round("running", EndReason.STOPPED)
        assert hub.stats("running").end_reason is EndReason.SHUTTING_DOWN
        with pytest.raises(HubShutDown):
            hub.open_round("new", K)

    asyncio.run(scenario())


def test_lookup_errors() -> None:
    hub = ArtifactHub(buffer_artifacts=100, retention_seconds=60)
    with pytest.raises(RoundNotFound):
        hub.subscribe(None)
    with pytest.raises(RoundNotFound):
        hub.subscribe("nope")
    with pytest.raises(RoundNotFound):
        hub.publish("nope", [1], vectors_for([1]))
    hub.open_round("a", K)
    hub.open_round("b", K)
    assert hub.current_round_id() == "b"
    with pytest.raises(RoundExists):
        hub.open_round("a", K)
    hub.close_round("a", EndReason.STOPPED)
    with pytest.raises(RoundClosed):
        hub.publish("a", [1], vectors_for([1]))
    with pytest.raises(ValueError):
        hub.subscribe("b", after_sequence=-1)
