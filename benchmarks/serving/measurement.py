"""One round of one streamed configuration: its streams started together, checked, timed and
CPU-accounted; and the round figures every configuration reports."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from benchmarks.serving.configuration import Configuration
from benchmarks.serving.cpu_accounting import CLOCK_TICKS_PER_SECOND, CpuSpent, CpuWindow
from benchmarks.serving.errors import BenchmarkError
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
