"""What is printed: the goals and the report.

The goals, judged at each concurrency: ours against each rival, like for like. CPU and speed are judged on the
median of ours-over-theirs ratios formed within each cycle: this machine's speed drifts by 10-15% over minutes, and
the drift cancels within a cycle. TTFT is judged on percentiles over every cycle's samples: one cycle's tail is one
or two draws of the engine's prefill cascade (see measurement.measure_ttft).

The report: how the run was made, the figures per concurrency, where each configuration saturates, their context
and the goal checks; and the progress line of one measured round."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from statistics import median
from typing import Any

from benchmarks.serving.measurement import Outcome, RoundResult, Summary, percentile, pooled_ttfts, summarize
from benchmarks.serving.servers import CLOCK_TICKS_PER_SECOND
from benchmarks.serving.settings import (
    ENGINE_ENV,
    MEASURED_SEED_BASE,
    OFFLINE,
    TEMPERATURE,
    TTFT_ROUND_TOKENS,
    WARMUP_TOKENS,
    Settings,
    Workload,
    logprobs_label,
)

TOKENS_PER_SECOND = "tokens/s"


@dataclass(frozen=True)
class RivalGoals:
    """What ours must achieve against one rival serving the same kind of stream."""

    rival: str
    logprobs: bool
    speed_goal: str = "≥ 1"
    speed_floor: float = 1.0
    # None: no such goal (the offline engine has no API process of its own to compare).
    api_cpu_goal: str | None = None
    api_cpu_limit: float | None = None
    # Ours packs the sampled logprobs inside the engine core (the packed_logprobs seam): that must not
    # make the engine processes work noticeably harder than stock vLLM's. None: no such goal.
    engine_cpu_limit: float | None = None
    ttft: bool = True  # False: the rival has no first token to time


# Like for like: ours with logprobs against OpenAI and the offline engine, ours without against
# vLLM's gRPC server.
RIVAL_GOALS = (
    RivalGoals("openai", True, api_cpu_goal="≤ 1/3", api_cpu_limit=1 / 3, engine_cpu_limit=1.02),
    RivalGoals("vllm-grpc", False, api_cpu_goal="≤ 1", api_cpu_limit=1.0),
    RivalGoals(OFFLINE, True, speed_goal="≥ 0.95", speed_floor=0.95, ttft=False),
)


@dataclass(frozen=True)
class GoalCheck:
    metric: str
    rival: str
    pair: str  # e.g. "ours (top-5) / openai (top-5)"
    streams: int
    ratio: float | None  # ours over theirs, as judged; None: the rival's figure was zero
    basis: str  # how `ratio` was formed
    per_cycle: tuple[float, ...]  # ours over theirs within each cycle, for the record
    goal: str
    met: bool | None

    @property
    def description(self) -> str:
        return f"{self.metric}, {self.pair}"

    def line(self) -> str:
        if self.ratio is None:
            return f"- {self.description}: n/a (goal {self.goal})"
        verdict = "met" if self.met else "NOT met"
        return f"- {self.description}: {self.ratio:.3f} ({self.basis}; per cycle {self.cycles()}); goal {self.goal}: {verdict}"

    def cycles(self) -> str:
        return ", ".join(f"{value:.3f}" for value in self.per_cycle)


def rounds_of(results: Sequence[RoundResult], server: str, logprobs: bool, streams: int) -> list[RoundResult]:
    return [r for r in results if (r.server, r.logprobs, r.streams) == (server, logprobs, streams)]


def paired_ratios(
    results: Sequence[RoundResult], ours: tuple[str, bool], theirs: tuple[str, bool], streams: int, metric: str
) -> tuple[float, ...]:
    """ours/theirs of `metric` within each cycle that measured both (and gave the rival a non-zero figure)."""
    mine = {r.cycle: getattr(r, metric) for r in rounds_of(results, *ours, streams)}
    rival = {r.cycle: getattr(r, metric) for r in rounds_of(results, *theirs, streams)}
    return tuple(mine[cycle] / rival[cycle] for cycle in sorted(mine.keys() & rival.keys()) if rival[cycle])


@dataclass(frozen=True)
class Pairing:
    """Ours against one rival at one concurrency: what every check of the pair shares."""

    results: Sequence[RoundResult]
    goals: RivalGoals
    streams: int

    @property
    def ours(self) -> tuple[str, bool]:
        return ("ours", self.goals.logprobs)

    @property
    def theirs(self) -> tuple[str, bool]:
        return (self.goals.rival, self.goals.logprobs)

    @property
    def label(self) -> str:
        kind = logprobs_label(self.goals.logprobs)
        return f"ours ({kind}) / {self.goals.rival} ({kind})"

    def ratios(self, field: str) -> tuple[float, ...]:
        return paired_ratios(self.results, self.ours, self.theirs, self.streams, field)

    def median_check(self, metric: str, field: str, goal: str, meets: Callable[[float], bool]) -> GoalCheck:
        """CPU and speed: drift between cycles cancels within a cycle, so the per-cycle ratios are judged."""
        per_cycle = self.ratios(field)
        if not per_cycle:
            return GoalCheck(metric, self.goals.rival, self.label, self.streams, None, "", per_cycle, goal, None)
        value = median(per_cycle)
        basis = f"median of {len(per_cycle)} per-cycle ratios"
        return GoalCheck(
            metric, self.goals.rival, self.label, self.streams, value, basis, per_cycle, goal, meets(value)
        )

    def pooled_ttft_check(self, q: float) -> GoalCheck:
        """TTFT: one cycle's tail is one or two draws of the engine's prefill cascade (see measure_ttft), so
        the percentiles are taken over every cycle's samples at once; the cycles interleave the servers."""
        mine = pooled_ttfts(rounds_of(self.results, *self.ours, self.streams))
        rival = pooled_ttfts(rounds_of(self.results, *self.theirs, self.streams))
        metric = f"TTFT p{q:g}"
        per_cycle = self.ratios("ttft_p50_ms" if q == 50 else "ttft_p99_ms")
        if not mine or not rival or not percentile(rival, q):
            return GoalCheck(metric, self.goals.rival, self.label, self.streams, None, "", per_cycle, "≤ 1", None)
        value = percentile(mine, q) / percentile(rival, q)
        basis = f"p{q:g} of {len(mine)} TTFTs over p{q:g} of {len(rival)}"
        return GoalCheck(
            metric, self.goals.rival, self.label, self.streams, value, basis, per_cycle, "≤ 1", value <= 1.0
        )


def at_most(limit: float) -> Callable[[float], bool]:
    return lambda value: value <= limit


def at_least(floor: float) -> Callable[[float], bool]:
    return lambda value: value >= floor


def goal_checks(results: Sequence[RoundResult], streams: int) -> list[GoalCheck]:
    """Every rival measured at `streams` alongside ours, in RIVAL_GOALS' order."""
    measured = {(r.server, r.logprobs, r.streams) for r in results}
    checks = []
    for goals in RIVAL_GOALS:
        pair = Pairing(results, goals, streams)
        if {(*pair.ours, streams), (*pair.theirs, streams)} - measured:
            continue
        if goals.api_cpu_goal is not None and goals.api_cpu_limit is not None:
            checks.append(
                pair.median_check(
                    "API CPU per token", "api_cpu_us_per_token", goals.api_cpu_goal, at_most(goals.api_cpu_limit)
                )
            )
        if goals.engine_cpu_limit is not None:
            engine_goal = f"≤ {goals.engine_cpu_limit:g}"
            engine_check = pair.median_check(
                "engine processes' CPU per token",
                "engine_cpu_us_per_token",
                engine_goal,
                at_most(goals.engine_cpu_limit),
            )
            checks.append(engine_check)
        checks.append(
            pair.median_check(TOKENS_PER_SECOND, "tokens_per_second", goals.speed_goal, at_least(goals.speed_floor))
        )
        if goals.ttft:
            checks += [pair.pooled_ttft_check(50), pair.pooled_ttft_check(99)]
    return checks


def all_goal_checks(results: Sequence[RoundResult]) -> list[GoalCheck]:
    """At every concurrency measured, lowest first."""
    return [check for streams in sorted({r.streams for r in results}) for check in goal_checks(results, streams)]


ABSENT = "—"


def by_concurrency(summaries: Sequence[Summary]) -> list[Summary]:
    """Lowest concurrency first; within one, the configurations in the run's order."""
    return sorted(summaries, key=lambda s: s.streams)


def milliseconds(value: float | None) -> str:
    return ABSENT if value is None else f"{value:.0f}"


def results_table(summaries: Sequence[Summary]) -> str:
    lines = [
        (
            "| streams | configuration | logprobs | tokens/s | TTFT p50 ms | TTFT p99 ms | API CPU µs/token (lowest-highest) "
            "| engine side CPU µs/token (all descendants) |"
        ),
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
        (
            "| streams | configuration | logprobs | wall s | TTFT samples | API user/system % "
            "| configurations standing by, CPU µs/token | load-generator CPU µs/token | load generator busy % |"
        ),
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
        (
            f"- machine: {machine['cpu']}, {machine['cores']} cores ({machine['usable_cores']} usable), "
            f"{machine['memory_gib']} GiB; {machine['platform']}"
        ),
        f"- software: {machine['vllm']}, grpcio {machine['grpcio']}, Python {machine['python']}",
        f"- command: {shlex.join(sys.orig_argv)}",
        f"- model: {settings.model}; engine flags (every configuration): {engine}",
        f"- vLLM's logged engine configuration: {engine_config_note(servers)}",
        (
            f"- workload: {workload.tokens} tokens per stream (ignore_eos, temperature {TEMPERATURE}, seed "
            f"{MEASURED_SEED_BASE}+stream), one {len(workload.prompt_ids)}-token chat prompt"
        ),
        (
            f"- measuring: {layout_note(settings)}; per concurrency a {WARMUP_TOKENS}-token warm-up round each, then "
            f"{settings.repeats} cycles of one measured round each, the order rotated per cycle; figures are medians over the cycles"
        ),
        (
            f"- TTFT: percentiles over the streams of every cycle's measured round and of the {settings.ttft_rounds} "
            f"rounds of {TTFT_ROUND_TOKENS}-token streams that follow it (at many streams one round's TTFTs are one "
            "draw of the engine's prefill cascade: clusters a whole engine step apart)"
        ),
        *(
            [
                (
                    f"- `{OFFLINE}`: vLLM's `LLM.generate` in a process of its own with the same engine flags: per round one "
                    "call with one prompt per stream (the chat prompt's token ids, as rendered with the model's chat template "
                    "here and checked against every server's prompt count), the same sampling and seeds; tokens/s = generated "
                    f"tokens / the call's wall time; no TTFT ({ABSENT}: the call returns every token at its end); API CPU = the "
                    "LLM process itself, engine side = all its descendants, both counted by that process around the call"
                )
            ]
            if OFFLINE in settings.kinds
            else []
        ),
        *(
            [
                (
                    f"- `ours, coalesce {workload.coalesce_ms} ms`: ours with top-5 logprobs and the opt-in "
                    "StreamOptions.coalesce_ms (after the first message, tokens are held up to that long so one message "
                    "carries several); not part of the goal checks, which compare per-step streaming"
                )
            ]
            if workload.coalesce_ms and "ours" in settings.kinds
            else []
        ),
        (
            "- API CPU: utime+stime of the serving process only (its descendants excluded), "
            f"± one clock tick (1/{CLOCK_TICKS_PER_SECOND} s) per round"
        ),
        (
            "- engine side CPU: utime+stime of all descendants of the serving process (engine core, its workers and "
            "helpers); on a GPU host the worker busy-polls, so this follows wall time as much as work"
        ),
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
        (
            "Context: the API process's user/system split, the CPU of every process of the other configurations "
            "meanwhile, this load generator's own CPU per delivered token and its share of the round's wall time "
            "(near 100 %: the load generator, not the server, sets the pace)."
        ),
        "",
        context_table(summaries),
    ]
    for streams in sorted({r.streams for r in results}):
        at = [c for c in checks if c.streams == streams]
        lines += [
            "",
            (
                f"### Goal checks at {streams} streams (CPU and speed: median of the ratios within each cycle; "
                "TTFT: percentiles over all cycles' samples)"
            ),
            "",
        ]
        lines += [c.line() for c in at] or ["- (needs ours and a rival in the same run)"]
    lines += failures_note(outcome.failures)
    return "\n".join(lines)


def format_progress(result: RoundResult) -> str:
    ttft = (
        "no TTFT"
        if result.ttft_p99_ms is None
        else f"TTFT p50 {result.ttft_p50_ms:.0f} ms, p99 {result.ttft_p99_ms:.0f} ms"
    )
    return (
        f"{result.server} ({logprobs_label(result.logprobs)}) x{result.streams}, cycle {result.cycle + 1}: {result.tokens_per_second:.0f} tok/s, "
        f"{ttft}, API CPU {result.api_cpu_us_per_token:.1f} us/token, engine side {result.engine_cpu_us_per_token:.0f} us/token, "
        f"wall {result.wall_seconds:.1f}s"
    )
