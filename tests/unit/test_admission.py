"""Admission: the concurrent-stream bound (refused with TOO_MANY_STREAMS and a retry delay) and shutdown."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from server.core.errors import ServiceError
from server.poc.gate.admission import Admission


def test_streams_beyond_the_bound_are_refused_until_one_ends() -> None:
    admission = Admission(max_streams=2)
    with admission.stream(), admission.stream():
        with pytest.raises(ServiceError) as refused, admission.stream():
            pass
        error = refused.value
        assert (error.code, error.reason_name, error.retry_after_seconds) == (
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "TOO_MANY_STREAMS",
            1.0,
        )
        assert "--max-concurrent-streams" in error.message
    with admission.stream():
        pass  # both slots came back, the refused attempt took none


def test_a_slot_comes_back_when_its_stream_fails() -> None:
    admission = Admission(max_streams=1)
    with pytest.raises(RuntimeError), admission.stream():
        raise RuntimeError("the stream failed")
    with admission.stream():
        pass


def test_zero_admits_any_number() -> None:
    admission = Admission(max_streams=0)
    with admission.stream(), admission.stream(), admission.stream():
        pass


def test_no_stream_is_admitted_once_closed() -> None:
    admission = Admission(max_streams=5)
    admission.close()
    with pytest.raises(ServiceError) as refused, admission.stream():
        pass
    assert (refused.value.code, refused.value.reason_name) == (grpc.StatusCode.UNAVAILABLE, "SHUTTING_DOWN")


def test_no_inference_stream_while_a_round_holds_the_gate() -> None:
    admission = Admission(max_streams=4)
    admission.gate.close("round-1")
    with pytest.raises(ServiceError) as refused, admission.stream():
        pass
    assert (refused.value.code, refused.value.reason_name) == (grpc.StatusCode.UNAVAILABLE, "POC_IN_PROGRESS")
    admission.gate.open()
    with admission.stream():
        pass


def test_a_waiting_slot_waits_for_a_free_one_within_the_same_bound() -> None:
    async def scenario() -> list[str]:
        admission = Admission(max_streams=2)
        events: list[str] = []
        release_first = asyncio.Event()

        async def replay(name: str, hold: asyncio.Event | None) -> None:
            async with admission.waiting_slot():
                events.append(f"{name} runs with {admission.streams} slot(s) held")
                if hold is not None:
                    await hold.wait()

        with admission.stream():  # the call's own slot
            first = asyncio.create_task(replay("first", release_first))
            await asyncio.sleep(0)
            second = asyncio.create_task(replay("second", None))
            await asyncio.sleep(0.01)
            events.append("second waits" if not second.done() else "second did not wait")
            with pytest.raises(ServiceError), admission.stream():  # a new stream is refused meanwhile: the bound holds
                pass
            release_first.set()
            await asyncio.gather(first, second)
        assert admission.streams == 0
        return events

    assert asyncio.run(scenario()) == [
        "first runs with 2 slot(s) held",
        "second waits",
        "second runs with 2 slot(s) held",
    ]


def test_waiting_replays_are_refused_once_the_server_closes() -> None:
    async def scenario() -> ServiceError:
        admission = Admission(max_streams=1)
        with admission.stream():
            waiting = asyncio.create_task(admission.waiting_slot().__aenter__())
            await asyncio.sleep(0.01)
            admission.close()
            with pytest.raises(ServiceError) as refused:
                await waiting
            return refused.value

    assert asyncio.run(scenario()).reason_name == "SHUTTING_DOWN"
