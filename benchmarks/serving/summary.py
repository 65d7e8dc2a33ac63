"""Each configuration's figures over its cycles: medians, and TTFT percentiles over every sample."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from statistics import median

from benchmarks.serving.round_result import RoundResult


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
