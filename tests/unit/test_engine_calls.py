"""Bounded waits on engine calls: a caller gives up in time, the call stays tracked, a stuck one is named."""

from __future__ import annotations

import asyncio

import pytest

from engine_ext.engine_calls import EngineCalls
from engine_ext.generation.errors import EngineCallTimeout


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_an_answered_call_returns_its_value_and_leaves_nothing_pending() -> None:
    async def scenario() -> None:
        calls = EngineCalls(timeout_seconds=1.0, stuck_after_seconds=5.0)

        async def answer() -> int:
            return 42

        assert await calls.call("utility x", answer()) == 42
        await asyncio.sleep(0)
        assert calls.problem() is None and not calls._pending

    asyncio.run(scenario())


def test_a_call_that_does_not_answer_times_out_then_counts_as_stuck_until_it_answers() -> None:
    async def scenario() -> None:
        clock = Clock()
        calls = EngineCalls(timeout_seconds=0.05, stuck_after_seconds=30.0, clock=clock)
        answer = asyncio.Event()

        async def stuck() -> str:
            await answer.wait()
            return "late"

        with pytest.raises(EngineCallTimeout) as caught:
            await calls.call("utility mlnode_scheduler_state", stuck())
        assert caught.value.name == "utility mlnode_scheduler_state" and caught.value.timeout_seconds == 0.05
        assert calls.problem() is None  # waiting, but not yet for long
        clock.now += 31
        problem = calls.problem()
        assert problem is not None and "mlnode_scheduler_state" in problem and "31 s" in problem
        answer.set()  # the engine answers after all: the abandoned call completes and is forgotten
        await asyncio.sleep(0.01)
        assert calls.problem() is None

    asyncio.run(scenario())


def test_a_caller_cancelled_meanwhile_leaves_the_call_tracked() -> None:
    async def scenario() -> None:
        clock = Clock()
        calls = EngineCalls(timeout_seconds=10.0, stuck_after_seconds=1.0, clock=clock)
        never = asyncio.Event()
        caller = asyncio.create_task(calls.call("collective_rpc report", never.wait()))
        await asyncio.sleep(0.01)
        caller.cancel()  # an RPC whose client went away
        with pytest.raises(asyncio.CancelledError):
            await caller
        clock.now += 2
        assert "collective_rpc report" in calls.problem()

    asyncio.run(scenario())


def test_a_failing_call_raises_its_error_to_the_caller() -> None:
    async def scenario() -> None:
        calls = EngineCalls(timeout_seconds=1.0, stuck_after_seconds=5.0)

        async def fail() -> None:
            raise RuntimeError("engine said no")

        with pytest.raises(RuntimeError, match="engine said no"):
            await calls.call("utility y", fail())
        assert calls.problem() is None

    asyncio.run(scenario())


def test_engine_work_is_waited_on_until_the_engine_would_count_as_stuck() -> None:
    """A PoC batch outlasting the engine-call timeout (kernels compiling on its first run) is still answered; one
    outlasting the stuck threshold fails with that threshold in its message."""

    async def scenario() -> None:
        calls = EngineCalls(timeout_seconds=0.02, stuck_after_seconds=0.2)
        assert calls.work_timeout_seconds == 0.2

        async def work(seconds: float) -> str:
            await asyncio.sleep(seconds)
            return "artifacts"

        assert await calls.call("PoC forward", work(0.08), calls.work_timeout_seconds) == "artifacts"
        with pytest.raises(EngineCallTimeout) as caught:
            await calls.call("PoC forward", work(0.5), calls.work_timeout_seconds)
        assert "did not answer PoC forward within 0.2 s" in str(caught.value)
        with pytest.raises(EngineCallTimeout):  # a report is still held to the engine-call timeout
            await calls.call("utility x", work(0.08))

    asyncio.run(scenario())


def test_the_work_timeout_is_never_below_the_engine_call_timeout() -> None:
    assert EngineCalls(timeout_seconds=300.0, stuck_after_seconds=120.0).work_timeout_seconds == 300.0
