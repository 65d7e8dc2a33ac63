"""The run: every server started, then per concurrency a warm-up round of each configuration and
--repeats cycles of measured rounds in an order rotated from cycle to cycle.

Why cycles: this machine's speed drifts by 10-15% over minutes, so two servers are compared within
a cycle, where their rounds are minutes apart at most (see goals).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AsyncExitStack, ExitStack, contextmanager
from typing import Any, TypeVar

from benchmarks.serving.errors import BenchmarkError
from benchmarks.serving.launcher import LiveServer, running_server
from benchmarks.serving.measurement import measure, warm_up
from benchmarks.serving.progress import format_progress, progress
from benchmarks.serving.round_result import RoundResult
from benchmarks.serving.scenarios import SCENARIO_BUILDERS
from benchmarks.serving.server_logs import short_tail
from benchmarks.serving.settings import Settings
from benchmarks.serving.workload import Workload

T = TypeVar("T")


def rotated(items: Sequence[T], shift: int) -> list[T]:
    """Each cycle starts one configuration later, so that none always runs first or last."""
    shift %= len(items)
    return [*items[shift:], *items[:shift]]


@contextmanager
def blamed_on(live: LiveServer) -> Iterator[None]:
    """A misbehaving server's error carries the end of its log."""
    try:
        yield
    except BenchmarkError as error:
        log = live.process.log_path
        raise BenchmarkError(f"{error}\n--- last lines of {log} ---\n{short_tail(live.process)}") from None


async def run(settings: Settings, workload: Workload) -> tuple[list[RoundResult], dict[str, Any]]:
    with ExitStack() as servers:
        # Startup blocks the event loop on purpose: the servers load one at a time, with nothing else running.
        lives = [servers.enter_context(running_server(kind, settings)) for kind in settings.kinds]
        async with AsyncExitStack() as clients:
            scenarios = [scenario for live in lives for scenario in await SCENARIO_BUILDERS[live.kind](clients, live, workload)]
            results = []
            for streams in settings.concurrencies:
                for scenario in scenarios:
                    with blamed_on(scenario.live):
                        await warm_up(scenario, streams, workload)
                for cycle in range(settings.repeats):
                    for scenario in rotated(scenarios, cycle):
                        bystanders = [live for live in lives if live is not scenario.live]
                        with blamed_on(scenario.live):
                            result = await measure(scenario, streams, cycle, bystanders, workload, settings.ttft_rounds)
                        progress(format_progress(result))
                        results.append(result)
        return results, {live.kind: live.info() for live in lives}
