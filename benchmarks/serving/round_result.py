"""One configuration's figures from one measured round."""

from __future__ import annotations

from dataclasses import dataclass


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
