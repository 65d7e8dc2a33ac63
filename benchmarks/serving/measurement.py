"""One measured round and what is made of it: the round's figures (RoundResult), a configuration as the schedule
runs it (its process, warm-up and measured round: streamed ones here, the offline one in offline), one streamed
round (streams started together, checked, timed and CPU-accounted), each configuration's figures over its cycles
(medians; TTFT percentiles over every sample) and the run's outcome so far."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median
from typing import Any, Protocol

from benchmarks.serving.drivers import Scenario, StreamResult
from benchmarks.serving.servers import CLOCK_TICKS_PER_SECOND, CpuSpent, CpuWindow
from benchmarks.serving.settings import (
    MEASURED_SEED_BASE,
    TTFT_ROUND_TOKENS,
    TTFT_SEED_BASE,
    WARMUP_SEED_BASE,
    WARMUP_TOKENS,
    BenchmarkError,
    Workload,
)


@dataclass(frozen=True)
class RoundResult:
    server: str
    logprobs: bool
    streams: int
    cycle: int  # which measuring cycle, from 0
    tokens: int
    wall_seconds: float
    tokens_per_second: float
    # Over this round's streams and those of the TTFT rounds after it. None and no samples: the
    # configuration has no first token to time (offline: one call returns every token at its end).
    ttft_p50_ms: float | None
    ttft_p99_ms: float | None
    ttft_samples_ms: tuple[float, ...]
    api_cpu_seconds: float
    api_user_seconds: float
    api_system_seconds: float
    api_cpu_us_per_token: float
    # /proc CPU times come in clock ticks: the per-token figure is only this exact.
    api_cpu_resolution_us_per_token: float
    # Every descendant of the serving process (engine core, and its workers with vLLM's multiprocess
    # executor): on a GPU the worker busy-polls, so this follows wall time as much as work.
    engine_cpu_us_per_token: float
    # Every process of the servers standing by meanwhile: shows that they do not compete.
    bystanders_cpu_us_per_token: float
    load_generator_cpu_us_per_token: float
    prompt_tokens: int


class Live(Protocol):
    """A started configuration's process (a server, or the offline engine's process)."""

    @property
    def kind(self) -> str: ...

    @property
    def log_path(self) -> Path: ...

    def process_ids(self) -> list[int]:
        """It and all its descendants now: what a bystander figure counts."""
        ...

    def info(self) -> dict[str, Any]:
        """For the JSON document: command, pids, vLLM's logged engine configuration."""
        ...


WarmUp = Callable[[int], Awaitable[None]]  # (streams)
Measure = Callable[[int, int, Sequence[int]], Awaitable[RoundResult]]  # (streams, cycle, bystander pids)


@dataclass(frozen=True)
class Configuration:
    label: str  # a server kind, ours with an option, or offline
    logprobs: bool
    live: Live
    warm_up: WarmUp
    measure: Measure


def percentile(values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def pooled_ttfts(rounds: Sequence[RoundResult]) -> list[float]:
    return [ttft for r in rounds for ttft in r.ttft_samples_ms]


@dataclass(frozen=True)
class Summary:
    """One configuration's figures: medians over its measured cycles."""

    server: str
    logprobs: bool
    streams: int
    cycles: int
    tokens_per_second: float
    # Over every stream of every cycle's measured and TTFT rounds together; None: no TTFT (offline).
    ttft_p50_ms: float | None
    ttft_p99_ms: float | None
    ttft_samples: int
    api_cpu_us_per_token: float
    api_cpu_min_us_per_token: float
    api_cpu_max_us_per_token: float
    api_cpu_resolution_us_per_token: float
    api_user_share: float | None  # of the API process's CPU; None when it spent none
    wall_seconds: float
    engine_cpu_us_per_token: float  # every descendant of the serving process
    bystanders_cpu_us_per_token: float
    load_generator_cpu_us_per_token: float


def summarize(results: Sequence[RoundResult]) -> list[Summary]:
    """Per configuration, in the order of first appearance."""
    groups: dict[tuple[str, bool, int], list[RoundResult]] = {}
    for result in results:
        groups.setdefault((result.server, result.logprobs, result.streams), []).append(result)
    summaries = []
    for (server, logprobs, streams), rounds in groups.items():

        def mid(name: str, rounds: list[RoundResult] = rounds) -> float:
            return median(getattr(r, name) for r in rounds)

        cpu = [r.api_cpu_us_per_token for r in rounds]
        ttfts = pooled_ttfts(rounds)
        api_seconds = sum(r.api_cpu_seconds for r in rounds)
        summaries.append(
            Summary(
                server=server,
                logprobs=logprobs,
                streams=streams,
                cycles=len(rounds),
                tokens_per_second=mid("tokens_per_second"),
                ttft_p50_ms=percentile(ttfts, 50) if ttfts else None,
                ttft_p99_ms=percentile(ttfts, 99) if ttfts else None,
                ttft_samples=len(ttfts),
                api_cpu_us_per_token=median(cpu),
                api_cpu_min_us_per_token=min(cpu),
                api_cpu_max_us_per_token=max(cpu),
                api_cpu_resolution_us_per_token=mid("api_cpu_resolution_us_per_token"),
                api_user_share=sum(r.api_user_seconds for r in rounds) / api_seconds if api_seconds else None,
                wall_seconds=mid("wall_seconds"),
                engine_cpu_us_per_token=mid("engine_cpu_us_per_token"),
                bystanders_cpu_us_per_token=mid("bystanders_cpu_us_per_token"),
                load_generator_cpu_us_per_token=mid("load_generator_cpu_us_per_token"),
            )
        )
    return summaries


@dataclass
class Outcome:
    """What the run measured, filled in as it goes: a failure keeps what came before it."""

    results: list[RoundResult] = field(default_factory=list)
    servers: dict[str, Any] = field(default_factory=dict)  # kind -> its process's info()
    failures: dict[str, str] = field(default_factory=dict)  # what failed -> the error


async def run_streams(scenario: Scenario, streams: int, seed_base: int, tokens: int) -> list[StreamResult]:
    return list(await asyncio.gather(*(scenario.stream(seed_base + i, tokens) for i in range(streams))))


def check_streams(scenario: Scenario, results: Sequence[StreamResult], workload: Workload, tokens: int) -> None:
    for index, result in enumerate(results):
        if result.tokens != tokens:
            raise BenchmarkError(f"{scenario.server}: stream {index} delivered {result.tokens} tokens, not {tokens}")
        if result.prompt_tokens != len(workload.prompt_ids):
            raise BenchmarkError(
                f"{scenario.server}: stream {index} had a {result.prompt_tokens}-token prompt, "
                f"not the {len(workload.prompt_ids)} rendered here"
            )


async def warm_up(scenario: Scenario, streams: int, workload: Workload) -> None:
    """Untimed: first-use code paths, compiled shapes, allocators, gRPC's flow-control windows."""
    tokens = min(WARMUP_TOKENS, workload.tokens)
    check_streams(scenario, await run_streams(scenario, streams, WARMUP_SEED_BASE, tokens), workload, tokens)


async def measure_ttft(scenario: Scenario, streams: int, cycle: int, rounds: int, workload: Workload) -> list[float]:
    """TTFTs (ms) of `rounds` more rounds whose streams stop at their first token.

    With many streams starting together the engine core starts a step with whatever requests have
    arrived, and the rest wait for it: TTFTs fall in two or three clusters a whole engine step
    apart (about 40 ms and 410 ms, say, at 64 streams here), and one round's p50 lands in one
    or the other by the timing of a few requests. More rounds give the percentiles a sample that
    holds several such draws.
    """
    samples: list[float] = []
    for index in range(rounds):
        seed_base = TTFT_SEED_BASE + (cycle * rounds + index) * streams
        results = await run_streams(scenario, streams, seed_base, TTFT_ROUND_TOKENS)
        check_streams(scenario, results, workload, TTFT_ROUND_TOKENS)
        samples += [result.ttft_ms for result in results]
    return samples


def round_result(
    label: str,
    logprobs: bool,
    streams: int,
    cycle: int,
    tokens: int,
    wall: float,
    ttfts: Sequence[float],
    cpu: CpuSpent,
    prompt_tokens: int,
) -> RoundResult:
    per_token_us = 1e6 / tokens
    return RoundResult(
        server=label,
        logprobs=logprobs,
        streams=streams,
        cycle=cycle,
        tokens=tokens,
        wall_seconds=wall,
        tokens_per_second=tokens / wall,
        ttft_p50_ms=percentile(ttfts, 50) if ttfts else None,
        ttft_p99_ms=percentile(ttfts, 99) if ttfts else None,
        ttft_samples_ms=tuple(ttfts),
        api_cpu_seconds=cpu.api,
        api_user_seconds=cpu.api_user,
        api_system_seconds=cpu.api_system,
        api_cpu_us_per_token=cpu.api * per_token_us,
        api_cpu_resolution_us_per_token=per_token_us / CLOCK_TICKS_PER_SECOND,
        engine_cpu_us_per_token=cpu.engine * per_token_us,
        bystanders_cpu_us_per_token=cpu.bystanders * per_token_us,
        load_generator_cpu_us_per_token=cpu.load_generator * per_token_us,
        prompt_tokens=prompt_tokens,
    )


def streamed(scenario: Scenario, workload: Workload, ttft_rounds: int) -> Configuration:
    async def warm(streams: int) -> None:
        await warm_up(scenario, streams, workload)

    async def measure(streams: int, cycle: int, bystander_pids: Sequence[int]) -> RoundResult:
        window = CpuWindow(scenario.live.api_pid, bystander_pids)
        results = await run_streams(scenario, streams, MEASURED_SEED_BASE, workload.tokens)
        cpu = window.close()
        check_streams(scenario, results, workload, workload.tokens)
        tokens = sum(result.tokens for result in results)
        wall = max(result.last_token_at for result in results) - min(result.sent_at for result in results)
        ttfts = [result.ttft_ms for result in results]
        ttfts += await measure_ttft(scenario, streams, cycle, ttft_rounds, workload)  # after the CPU accounting
        return round_result(
            scenario.server, scenario.logprobs, streams, cycle, tokens, wall, ttfts, cpu, len(workload.prompt_ids)
        )

    return Configuration(scenario.server, scenario.logprobs, scenario.live, warm, measure)
