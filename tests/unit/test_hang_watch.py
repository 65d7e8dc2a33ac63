"""The hang rule (engine_ext.hang_watch) on its own clock: frozen checks after the grace, reset by any progress or
by no work waiting. A real hung engine (its core stopped with SIGSTOP) is tested end to end (tests/e2e/test_hang.py)."""

from __future__ import annotations

from engine_ext.hang_watch import HangRule, HangWatch
from engine_ext.step_progress import ProgressSample, StepProgress


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def watch(grace: float = 10.0, checks: int = 3) -> tuple[HangWatch, Clock]:
    clock = Clock()
    return HangWatch(HangRule(grace, checks), clock), clock


def test_work_waiting_without_progress_hangs_after_the_grace_and_that_many_frozen_checks() -> None:
    hang, clock = watch()
    hang.check(ProgressSample(5, 2))
    for _ in range(19):  # 9.5 s of checks: within the grace
        clock.now += 0.5
        hang.check(ProgressSample(5, 2))
    assert hang.problem() is None
    clock.now += 0.5
    hang.check(ProgressSample(5, 2))  # 10 s: the first frozen check
    clock.now += 0.5
    hang.check(ProgressSample(5, 2))
    assert hang.problem() is None
    clock.now += 0.5
    hang.check(ProgressSample(5, 2))
    problem = hang.problem()
    assert problem is not None and "no step progress for 11 s while requests wait" in problem, problem


def test_progress_ends_a_hang_and_restarts_the_grace() -> None:
    hang, clock = watch(grace=1.0, checks=1)
    hang.check(ProgressSample(5, 1))
    clock.now += 2
    hang.check(ProgressSample(5, 1))
    assert hang.problem() is not None
    hang.check(ProgressSample(6, 1))
    assert hang.problem() is None
    clock.now += 0.5
    hang.check(ProgressSample(6, 1))
    assert hang.problem() is None


def test_an_idle_engine_never_hangs_however_long_it_stands_still() -> None:
    hang, clock = watch(grace=1.0, checks=1)
    for _ in range(10):
        clock.now += 5
        hang.check(ProgressSample(5, 0))
    assert hang.problem() is None
    # Work that arrives at an idle engine gets the whole grace from its first check.
    hang.check(ProgressSample(5, 1))
    clock.now += 0.9
    hang.check(ProgressSample(5, 1))
    assert hang.problem() is None


def test_step_progress_counts_each_output_batch_the_processor_handles_and_returns_its_result() -> None:
    class Processor:
        def process_outputs(self, outputs: list[int], timestamp: float | None = None) -> int:
            return len(outputs)

    processor = Processor()
    progress = StepProgress()
    progress.install(processor)
    assert processor.process_outputs([1, 2, 3]) == 3 and processor.process_outputs([], timestamp=1.0) == 0
    assert progress.output_batches == 2
