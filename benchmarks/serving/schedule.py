"""The run: per concurrency a warm-up round of each configuration, then --repeats cycles of measured
rounds in an order rotated from cycle to cycle; the configurations started side by side (default) or
one at a time.

Why cycles side by side: this machine's speed drifts by 10-15% over minutes, so two configurations
are compared within a cycle, where their rounds are minutes apart at most (see goals). One at a time
(where two engines cannot share the accelerator): each configuration is started, measured at every
concurrency and cycle, and stopped before the next starts; a cycle then pairs rounds further apart,
and a configuration that fails leaves the others to run (one long run on a lent machine is not lost).
"""

from __future__ import annotations

import traceback
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import AsyncExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

from benchmarks.serving.configuration import Configuration, Live
from benchmarks.serving.errors import BenchmarkError
from benchmarks.serving.progress import format_progress, progress
from benchmarks.serving.round_result import RoundResult
from benchmarks.serving.scenarios import configurations, started
from benchmarks.serving.server_logs import short_tail
from benchmarks.serving.settings import Settings
from benchmarks.serving.workload import Workload

T = TypeVar("T")


@dataclass
class Outcome:
    """What the run measured, filled in as it goes: a failure keeps what came before it."""

    results: list[RoundResult] = field(default_factory=list)
    servers: dict[str, Any] = field(default_factory=dict)  # kind -> its process's info()
    failures: dict[str, str] = field(default_factory=dict)  # what failed -> the error


def rotated(items: Sequence[T], shift: int) -> list[T]:
    """Each cycle starts one configuration later, so that none always runs first or last."""
    shift %= len(items)
    return [*items[shift:], *items[:shift]]


@contextmanager
def blamed_on(live: Live) -> Iterator[None]:
    """A misbehaving configuration's error carries the end of its log."""
    try:
        yield
    except BenchmarkError as error:
        raise BenchmarkError(f"{error}\n--- last lines of {live.log_path} ---\n{short_tail(live.log_path)}") from None


async def measure_all(
    chosen: Sequence[Configuration], lives: Sequence[Live], settings: Settings, outcome: Outcome
) -> None:
    """Every concurrency's warm-ups and cycles of `chosen`; `lives` are all processes running meanwhile."""
    for streams in settings.concurrencies:
        for configuration in chosen:
            with blamed_on(configuration.live):
                await configuration.warm_up(streams)
        for cycle in range(settings.repeats):
            for configuration in rotated(chosen, cycle):
                bystanders = [pid for live in lives if live is not configuration.live for pid in live.process_ids()]
                with blamed_on(configuration.live):
                    result = await configuration.measure(streams, cycle, bystanders)
                progress(format_progress(result))
                outcome.results.append(result)


async def side_by_side(settings: Settings, workload: Workload, outcome: Outcome) -> None:
    async with AsyncExitStack() as processes:
        # Loaded one at a time, then kept running side by side.
        lives = []
        for kind in settings.kinds:
            lives.append(await processes.enter_async_context(started(kind, settings)))
            outcome.servers[kind] = lives[-1].info()
        async with AsyncExitStack() as clients:
            chosen = [c for live in lives for c in await configurations(clients, live, workload, settings)]
            await measure_all(chosen, lives, settings, outcome)


async def alone(kind: str, settings: Settings, workload: Workload, outcome: Outcome) -> None:
    async with started(kind, settings) as live, AsyncExitStack() as clients:
        outcome.servers[kind] = live.info()
        await measure_all(await configurations(clients, live, workload, settings), [live], settings, outcome)


async def recorded(what: str, attempt: Awaitable[None], outcome: Outcome) -> None:
    """Any error, not only a misbehaving server's: the rounds measured before it are still reported."""
    try:
        await attempt
    except BenchmarkError as error:
        outcome.failures[what] = str(error)
    except Exception:
        outcome.failures[what] = traceback.format_exc()
    else:
        return
    progress(f"FAILED: {what}: {outcome.failures[what]}")


async def run(settings: Settings, workload: Workload, checkpoint: Callable[[Outcome], None]) -> Outcome:
    """`checkpoint` gets the outcome so far after each configuration run alone, and at the end: a run
    stopped from outside (a lent machine's time limit) keeps what it measured."""
    outcome = Outcome()
    if settings.one_at_a_time:
        for kind in settings.kinds:
            await recorded(kind, alone(kind, settings, workload, outcome), outcome)
            checkpoint(outcome)
    else:
        await recorded(", ".join(settings.kinds), side_by_side(settings, workload, outcome), outcome)
        checkpoint(outcome)
    return outcome
