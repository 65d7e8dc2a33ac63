"""One round of one configuration: its streams started together, checked, timed and CPU-accounted."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from benchmarks.serving.cpu_accounting import CLOCK_TICKS_PER_SECOND, process_cpu_ticks, processes_cpu_seconds
from benchmarks.serving.errors import BenchmarkError
from benchmarks.serving.launcher import LiveServer
from benchmarks.serving.round_result import RoundResult
from benchmarks.serving.streams import Scenario, StreamResult
from benchmarks.serving.summary import percentile
from benchmarks.serving.workload import (
    MEASURED_SEED_BASE,
    TTFT_ROUND_TOKENS,
    TTFT_SEED_BASE,
    WARMUP_SEED_BASE,
    WARMUP_TOKENS,
    Workload,
)


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


async def measure(
    scenario: Scenario, streams: int, cycle: int, bystanders: Sequence[LiveServer], workload: Workload, ttft_rounds: int
) -> RoundResult:
    live = scenario.live
    engine_pids = [info.pid for info in live.engine_processes]
    bystander_pids = [pid for server in bystanders for pid in server.pids]
    api_before, engine_before = process_cpu_ticks(live.api_pid), processes_cpu_seconds(engine_pids)
    bystanders_before = processes_cpu_seconds(bystander_pids)
    client_before = time.process_time()
    results = await run_streams(scenario, streams, MEASURED_SEED_BASE, workload.tokens)
    api_after = process_cpu_ticks(live.api_pid)
    # Differences of whole ticks: equal figures of two servers stay exactly equal.
    api_user = (api_after[0] - api_before[0]) / CLOCK_TICKS_PER_SECOND
    api_system = (api_after[1] - api_before[1]) / CLOCK_TICKS_PER_SECOND
    api_cpu = api_user + api_system
    engine_cpu = processes_cpu_seconds(engine_pids) - engine_before
    bystanders_cpu = processes_cpu_seconds(bystander_pids) - bystanders_before
    client_cpu = time.process_time() - client_before
    check_streams(scenario, results, workload, workload.tokens)

    tokens = sum(result.tokens for result in results)
    wall = max(result.last_token_at for result in results) - min(result.sent_at for result in results)
    ttfts = [result.ttft_ms for result in results]
    ttfts += await measure_ttft(scenario, streams, cycle, ttft_rounds, workload)  # after the CPU accounting
    per_token_us = 1e6 / tokens
    return RoundResult(
        server=scenario.server,
        logprobs=scenario.logprobs,
        streams=streams,
        cycle=cycle,
        tokens=tokens,
        wall_seconds=wall,
        tokens_per_second=tokens / wall,
        ttft_p50_ms=percentile(ttfts, 50),
        ttft_p99_ms=percentile(ttfts, 99),
        ttft_samples_ms=tuple(ttfts),
        api_cpu_seconds=api_cpu,
        api_user_seconds=api_user,
        api_system_seconds=api_system,
        api_cpu_us_per_token=api_cpu * per_token_us,
        api_cpu_resolution_us_per_token=per_token_us / CLOCK_TICKS_PER_SECOND,
        engine_cpu_us_per_token=engine_cpu * per_token_us,
        bystanders_cpu_us_per_token=bystanders_cpu * per_token_us,
        load_generator_cpu_us_per_token=client_cpu * per_token_us,
        prompt_tokens=len(workload.prompt_ids),
    )
