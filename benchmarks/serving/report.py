"""The printed report: how the run was made, the figures per concurrency, where each configuration
saturates, their context and the goal checks."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Sequence
from typing import Any

from benchmarks.serving.cpu_accounting import CLOCK_TICKS_PER_SECOND
from benchmarks.serving.goals import TOKENS_PER_SECOND, GoalCheck, all_goal_checks
from benchmarks.serving.kinds import OFFLINE
from benchmarks.serving.schedule import Outcome
from benchmarks.serving.settings import ENGINE_ENV, Settings
from benchmarks.serving.summary import Summary, summarize
from benchmarks.serving.workload import (
    MEASURED_SEED_BASE,
    TEMPERATURE,
    TTFT_ROUND_TOKENS,
    WARMUP_TOKENS,
    Workload,
    logprobs_label,
)

ABSENT = "—"


def by_concurrency(summaries: Sequence[Summary]) -> list[Summary]:
    """Lowest concurrency first; within one, the configurations in the run's order."""
    return sorted(summaries, key=lambda s: s.streams)


def milliseconds(value: float | None) -> str:
    return ABSENT if value is None else f"{value:.0f}"


def results_table(summaries: Sequence[Summary]) -> str:
    lines = [
        "| streams | configuration | logprobs | tokens/s | TTFT p50 ms | TTFT p99 ms | API CPU µs/token (lowest-highest) "
        "| engine side CPU µs/token (all descendants) |",
        "|---:|---|---|---:|---:|---:|---:|---:|",
    ]
    for s in by_concurrency(summaries):
        spread = f" ({s.api_cpu_min_us_per_token:.1f}-{s.api_cpu_max_us_per_token:.1f})" if s.cycles > 1 else ""
        lines.append(
            f"| {s.streams} | {s.server} | {logprobs_label(s.logprobs)} | {s.tokens_per_second:.1f} | "
            f"{milliseconds(s.ttft_p50_ms)} | {milliseconds(s.ttft_p99_ms)} | "
            f"{s.api_cpu_us_per_token:.1f} ±{s.api_cpu_resolution_us_per_token:.1f}{spread} | {s.engine_cpu_us_per_token:.0f} |"
        )
    return "\n".join(lines)


def saturation_table(summaries: Sequence[Summary]) -> str:
    """tokens/s of each configuration across the concurrencies, with the gain over the one before."""
    concurrencies = sorted({s.streams for s in summaries})
    rows: dict[tuple[str, bool], dict[int, float]] = {}
    for s in summaries:
        rows.setdefault((s.server, s.logprobs), {})[s.streams] = s.tokens_per_second
    lines = [
        "| configuration | logprobs | " + " | ".join(f"{streams} streams" for streams in concurrencies) + " |",
        "|---|---|" + "---:|" * len(concurrencies),
    ]
    for (server, logprobs), speeds in rows.items():
        cells, previous = [], None
        for streams in concurrencies:
            speed = speeds.get(streams)
            if speed is None:
                cells.append(ABSENT)
            else:
                gain = f" (×{speed / previous:.2f})" if previous else ""
                cells.append(f"{speed:.1f}{gain}")
            previous = speed
        lines.append(f"| {server} | {logprobs_label(logprobs)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def speed_ratio_table(checks: Sequence[GoalCheck]) -> str:
    """The tokens/s goals at a glance: one column per rival, one row per concurrency."""
    speed = [c for c in checks if c.metric == TOKENS_PER_SECOND]
    rivals = list(dict.fromkeys(c.rival for c in speed))
    cells = {(c.streams, c.rival): c for c in speed}
    headers = [next(c for c in speed if c.rival == rival) for rival in rivals]
    lines = [
        "| streams | " + " | ".join(f"{h.pair} (goal {h.goal})" for h in headers) + " |",
        "|---:|" + "---:|" * len(rivals),
    ]
    for streams in sorted({c.streams for c in speed}):
        row = []
        for rival in rivals:
            check = cells.get((streams, rival))
            if check is None or check.ratio is None:
                row.append(ABSENT)
            else:
                row.append(f"**{check.ratio:.3f}** ({check.cycles()}) {'met' if check.met else 'NOT met'}")
        lines.append(f"| {streams} | " + " | ".join(row) + " |")
    return "\n".join(lines)


def user_system_split(summary: Summary) -> str:
    if summary.api_user_share is None:
        return "-"
    user = round(100 * summary.api_user_share)
    return f"{user}/{100 - user}"


def context_table(summaries: Sequence[Summary]) -> str:
    lines = [
        "| streams | configuration | logprobs | wall s | TTFT samples | API user/system % "
        "| configurations standing by, CPU µs/token | load-generator CPU µs/token | load generator busy % |",
        "|---:|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for s in by_concurrency(summaries):
        busy = s.load_generator_cpu_us_per_token * s.tokens_per_second / 1e4
        lines.append(
            f"| {s.streams} | {s.server} | {logprobs_label(s.logprobs)} | {s.wall_seconds:.1f} | {s.ttft_samples} | "
            f"{user_system_split(s)} | {s.bystanders_cpu_us_per_token:.1f} | {s.load_generator_cpu_us_per_token:.0f} | {busy:.0f} |"
        )
    return "\n".join(lines)


def engine_config_note(servers: dict[str, Any]) -> str:
    configs = {kind: info["engine_config"] for kind, info in servers.items()}
    if None in configs.values():
        missing = ", ".join(kind for kind, config in configs.items() if config is None)
        return f"not found in the log of {missing}"
    groups: dict[str, list[str]] = {}
    for kind, config in configs.items():
        groups.setdefault(config, []).append(kind)
    if len(groups) == 1:
        return "identical in every configuration's log"
    return (
        "DIFFERENT; identical within each of "
        + " | ".join(", ".join(kinds) for kinds in groups.values())
        + " (see the JSON output)"
    )


def layout_note(settings: Settings) -> str:
    if settings.one_at_a_time:
        return (
            "one at a time: each configuration started, measured at every concurrency and cycle, and stopped before "
            "the next starts (a cycle's rounds of two configurations are far apart)"
        )
    return "the configurations run side by side, loaded one at a time"


def failures_note(failures: dict[str, str]) -> list[str]:
    """First lines only: the whole errors (log tails) went to stderr, and the report must stay short."""
    if not failures:
        return []
    return ["", "### FAILED (the figures above lack these; stderr has the errors in full)", ""] + [
        f"- {what}: {error.strip().splitlines()[0] if error.strip() else '?'}" for what, error in failures.items()
    ]


def report(settings: Settings, workload: Workload, outcome: Outcome, machine: dict[str, Any], wall: float) -> str:
    results, servers = outcome.results, outcome.servers
    checks = all_goal_checks(results)
    summaries = summarize(results)
    engine = shlex.join(settings.engine_flags) + " " + " ".join(f"{k}={v}" for k, v in ENGINE_ENV.items())
    lines = [
        "## Serving benchmark",
        "",
        f"- machine: {machine['cpu']}, {machine['cores']} cores ({machine['usable_cores']} usable), "
        f"{machine['memory_gib']} GiB; {machine['platform']}",
        f"- software: {machine['vllm']}, grpcio {machine['grpcio']}, Python {machine['python']}",
        f"- command: {shlex.join(sys.orig_argv)}",
        f"- model: {settings.model}; engine flags (every configuration): {engine}",
        f"- vLLM's logged engine configuration: {engine_config_note(servers)}",
        f"- workload: {workload.tokens} tokens per stream (ignore_eos, temperature {TEMPERATURE}, seed "
        f"{MEASURED_SEED_BASE}+stream), one {len(workload.prompt_ids)}-token chat prompt",
        f"- measuring: {layout_note(settings)}; per concurrency a {WARMUP_TOKENS}-token warm-up round each, then "
        f"{settings.repeats} cycles of one measured round each, the order rotated per cycle; figures are medians over the cycles",
        f"- TTFT: percentiles over the streams of every cycle's measured round and of the {settings.ttft_rounds} "
        f"rounds of {TTFT_ROUND_TOKENS}-token streams that follow it (at many streams one round's TTFTs are one "
        "draw of the engine's prefill cascade: clusters a whole engine step apart)",
        *(
            [
                f"- `{OFFLINE}`: vLLM's `LLM.generate` in a process of its own with the same engine flags: per round one "
                "call with one prompt per stream (the chat prompt's token ids, as rendered with the model's chat template "
                "here and checked against every server's prompt count), the same sampling and seeds; tokens/s = generated "
                f"tokens / the call's wall time; no TTFT ({ABSENT}: the call returns every token at its end); API CPU = the "
                "LLM process itself, engine side = all its descendants, both counted by that process around the call"
            ]
            if OFFLINE in settings.kinds
            else []
        ),
        *(
            [
                f"- `ours, coalesce {workload.coalesce_ms} ms`: ours with top-5 logprobs and the opt-in "
                "StreamOptions.coalesce_ms (after the first message, tokens are held up to that long so one message "
                "carries several); not part of the goal checks, which compare per-step streaming"
            ]
            if workload.coalesce_ms and "ours" in settings.kinds
            else []
        ),
        "- API CPU: utime+stime of the serving process only (its descendants excluded), "
        f"± one clock tick (1/{CLOCK_TICKS_PER_SECOND} s) per round",
        "- engine side CPU: utime+stime of all descendants of the serving process (engine core, its workers and "
        "helpers); on a GPU host the worker busy-polls, so this follows wall time as much as work",
        f"- whole run: {wall / 60:.1f} min",
        "",
        "### Figures per concurrency",
        "",
        results_table(summaries),
        "",
        "### tokens/s by concurrency (where each saturates: the gain over the concurrency before)",
        "",
        saturation_table(summaries),
        "",
        "### tokens/s ratios (median of the ratios within each cycle; the cycles' own in brackets)",
        "",
        speed_ratio_table(checks) if any(c.metric == TOKENS_PER_SECOND for c in checks) else "(needs ours and a rival)",
        "",
        "Context: the API process's user/system split, the CPU of every process of the other configurations "
        "meanwhile, this load generator's own CPU per delivered token and its share of the round's wall time "
        "(near 100 %: the load generator, not the server, sets the pace).",
        "",
        context_table(summaries),
    ]
    for streams in sorted({r.streams for r in results}):
        at = [c for c in checks if c.streams == streams]
        lines += [
            "",
            f"### Goal checks at {streams} streams (CPU and speed: median of the ratios within each cycle; "
            "TTFT: percentiles over all cycles' samples)",
            "",
        ]
        lines += [c.line() for c in at] or ["- (needs ours and a rival in the same run)"]
    lines += failures_note(outcome.failures)
    return "\n".join(lines)
