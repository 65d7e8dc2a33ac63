"""The printed report: how the run was made, the figures, their context and the goal checks."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Sequence
from typing import Any

from benchmarks.serving.cpu_accounting import CLOCK_TICKS_PER_SECOND
from benchmarks.serving.goals import goal_checks, goal_streams
from benchmarks.serving.round_result import RoundResult
from benchmarks.serving.settings import ENGINE_ENV, ENGINE_FLAGS, Settings
from benchmarks.serving.summary import Summary, summarize
from benchmarks.serving.workload import (
    MEASURED_SEED_BASE,
    TEMPERATURE,
    TTFT_ROUND_TOKENS,
    WARMUP_TOKENS,
    Workload,
    logprobs_label,
)


def results_table(summaries: Sequence[Summary]) -> str:
    lines = [
        "| server | logprobs | streams | tokens/s | TTFT p50 ms | TTFT p99 ms | API CPU µs/token (lowest-highest) |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for s in summaries:
        spread = f" ({s.api_cpu_min_us_per_token:.1f}-{s.api_cpu_max_us_per_token:.1f})" if s.cycles > 1 else ""
        lines.append(
            f"| {s.server} | {logprobs_label(s.logprobs)} | {s.streams} | {s.tokens_per_second:.1f} | "
            f"{s.ttft_p50_ms:.0f} | {s.ttft_p99_ms:.0f} | {s.api_cpu_us_per_token:.1f} ±{s.api_cpu_resolution_us_per_token:.1f}{spread} |"
        )
    return "\n".join(lines)


def user_system_split(summary: Summary) -> str:
    if summary.api_user_share is None:
        return "-"
    user = round(100 * summary.api_user_share)
    return f"{user}/{100 - user}"


def context_table(summaries: Sequence[Summary]) -> str:
    lines = [
        "| server | logprobs | streams | wall s | TTFT samples | API user/system % | engine processes CPU µs/token "
        "| servers standing by, CPU µs/token | load-generator CPU µs/token |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in summaries:
        lines.append(
            f"| {s.server} | {logprobs_label(s.logprobs)} | {s.streams} | {s.wall_seconds:.1f} | {s.ttft_samples} | {user_system_split(s)} | "
            f"{s.engine_cpu_us_per_token:.0f} | {s.bystanders_cpu_us_per_token:.1f} | {s.load_generator_cpu_us_per_token:.0f} |"
        )
    return "\n".join(lines)


def engine_config_note(servers: dict[str, Any]) -> str:
    configs = {kind: info["engine_config"] for kind, info in servers.items()}
    if None in configs.values():
        missing = ", ".join(kind for kind, config in configs.items() if config is None)
        return f"not found in the log of {missing}"
    if len(set(configs.values())) == 1:
        return "identical in every server's log"
    return "DIFFERENT between servers (see the JSON output)"


def report(
    settings: Settings,
    workload: Workload,
    results: Sequence[RoundResult],
    servers: dict[str, Any],
    machine: dict[str, Any],
    wall: float,
) -> str:
    checked_at = goal_streams(settings)
    checks = goal_checks(results, checked_at)
    summaries = summarize(results)
    engine = " ".join(ENGINE_FLAGS) + " " + " ".join(f"{k}={v}" for k, v in ENGINE_ENV.items())
    lines = [
        "## Serving benchmark",
        "",
        f"- machine: {machine['cpu']}, {machine['cores']} cores ({machine['usable_cores']} usable), "
        f"{machine['memory_gib']} GiB; {machine['platform']}",
        f"- software: {machine['vllm']}, grpcio {machine['grpcio']}, Python {machine['python']}",
        f"- command: {shlex.join(sys.orig_argv)}",
        f"- model: {settings.model}; engine flags (every server): {engine}",
        f"- vLLM's logged engine configuration: {engine_config_note(servers)}",
        f"- workload: {workload.tokens} tokens per stream (ignore_eos, temperature {TEMPERATURE}, seed "
        f"{MEASURED_SEED_BASE}+stream), one {len(workload.prompt_ids)}-token chat prompt",
        f"- measuring: the servers run side by side, one loaded at a time; per concurrency a {WARMUP_TOKENS}-token "
        f"warm-up round each, then {settings.repeats} cycles of one measured round each, the order rotated per cycle; "
        "figures are medians over the cycles",
        f"- TTFT: percentiles over the streams of every cycle's measured round and of the {settings.ttft_rounds} "
        f"rounds of {TTFT_ROUND_TOKENS}-token streams that follow it (at many streams one round's TTFTs are one "
        "draw of the engine's prefill cascade: clusters a whole engine step apart)",
        *(
            [
                f"- `ours, coalesce {workload.coalesce_ms} ms`: ours with top-5 logprobs and the opt-in "
                "StreamOptions.coalesce_ms (after the first message, tokens are held up to that long so one message "
                "carries several); not part of the goal checks, which compare per-step streaming"
            ]
            if workload.coalesce_ms
            else []
        ),
        "- API CPU: utime+stime of the serving process only (its engine-core child excluded), "
        f"± one clock tick (1/{CLOCK_TICKS_PER_SECOND} s) per round",
        f"- whole run: {wall / 60:.1f} min",
        "",
        results_table(summaries),
        "",
        "Context: the API process's user/system split, its child processes' CPU (engine core and helpers; a goal "
        "against OpenAI's below), the CPU of every process of the other servers meanwhile, and this load "
        "generator's own CPU, per delivered token.",
        "",
        context_table(summaries),
        "",
        f"### Goal check at {checked_at} streams (CPU and speed: median of the ratios within each cycle; TTFT: "
        "percentiles over all cycles' samples)",
        "",
    ]
    lines += [c.line() for c in checks]
    if not checks:
        lines.append("- (needs ours and at least one vLLM server in the same run)")
    return "\n".join(lines)
