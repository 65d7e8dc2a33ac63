"""The goals, judged at one concurrency: ours against each rival server, like for like.

CPU and speed are judged on the median of ours-over-theirs ratios formed within each cycle: this
machine's speed drifts by 10-15% over minutes, and the drift cancels within a cycle. TTFT is judged
on percentiles over every cycle's samples: one cycle's tail is one or two draws of the engine's
prefill cascade (see measurement.measure_ttft).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from statistics import median

from benchmarks.serving.round_result import RoundResult
from benchmarks.serving.settings import Settings
from benchmarks.serving.summary import percentile, pooled_ttfts
from benchmarks.serving.workload import logprobs_label


@dataclass(frozen=True)
class RivalGoals:
    """What ours must achieve against one rival serving the same kind of stream."""

    rival: str
    logprobs: bool
    api_cpu_goal: str
    api_cpu_limit: float
    # Ours packs the sampled logprobs inside the engine core (the packed_logprobs seam): that must not
    # make the engine processes work noticeably harder than stock vLLM's. None: no such goal.
    engine_cpu_limit: float | None = None


# Like for like: ours with logprobs against OpenAI, ours without against vLLM's gRPC server.
RIVAL_GOALS = (
    RivalGoals("openai", True, "≤ 1/3", 1 / 3, engine_cpu_limit=1.02),
    RivalGoals("vllm-grpc", False, "≤ 1", 1.0),
)


@dataclass(frozen=True)
class GoalCheck:
    description: str
    ratio: float | None  # ours over theirs, as judged; None: the rival's figure was zero
    basis: str  # how `ratio` was formed
    per_cycle: tuple[float, ...]  # ours over theirs within each cycle, for the record
    goal: str
    met: bool | None

    def line(self) -> str:
        if self.ratio is None:
            return f"- {self.description}: n/a (goal {self.goal})"
        each = ", ".join(f"{value:.3f}" for value in self.per_cycle)
        verdict = "met" if self.met else "NOT met"
        return f"- {self.description}: {self.ratio:.3f} ({self.basis}; per cycle {each}); goal {self.goal}: {verdict}"


def rounds_of(results: Sequence[RoundResult], server: str, logprobs: bool, streams: int) -> list[RoundResult]:
    return [r for r in results if (r.server, r.logprobs, r.streams) == (server, logprobs, streams)]


def paired_ratios(results: Sequence[RoundResult], ours: tuple[str, bool], theirs: tuple[str, bool], streams: int, metric: str) -> tuple[float, ...]:
    """ours/theirs of `metric` within each cycle that measured both (and gave the rival a non-zero figure)."""
    mine = {r.cycle: getattr(r, metric) for r in rounds_of(results, *ours, streams)}
    rival = {r.cycle: getattr(r, metric) for r in rounds_of(results, *theirs, streams)}
    return tuple(mine[cycle] / rival[cycle] for cycle in sorted(mine.keys() & rival.keys()) if rival[cycle])


def median_check(description: str, per_cycle: tuple[float, ...], goal: str, meets: Callable[[float], bool]) -> GoalCheck:
    """CPU and speed: drift between cycles cancels within a cycle, so the per-cycle ratios are judged."""
    if not per_cycle:
        return GoalCheck(description, None, "", per_cycle, goal, None)
    value = median(per_cycle)
    return GoalCheck(description, value, f"median of {len(per_cycle)} per-cycle ratios", per_cycle, goal, meets(value))


def pooled_ttft_check(
    results: Sequence[RoundResult], ours: tuple[str, bool], theirs: tuple[str, bool], streams: int, q: float, goal: str, description: str
) -> GoalCheck:
    """TTFT: one cycle's tail is one or two draws of the engine's prefill cascade (see measure_ttft), so
    the percentiles are taken over every cycle's samples at once; the cycles interleave the servers."""
    mine = pooled_ttfts(rounds_of(results, *ours, streams))
    rival = pooled_ttfts(rounds_of(results, *theirs, streams))
    metric = "ttft_p50_ms" if q == 50 else "ttft_p99_ms"
    per_cycle = paired_ratios(results, ours, theirs, streams, metric)
    if not mine or not rival or not percentile(rival, q):
        return GoalCheck(description, None, "", per_cycle, goal, None)
    value = percentile(mine, q) / percentile(rival, q)
    return GoalCheck(description, value, f"p{q:g} of {len(mine)} TTFTs over p{q:g} of {len(rival)}", per_cycle, goal, value <= 1.0)


def at_most(limit: float) -> Callable[[float], bool]:
    return lambda value: value <= limit


def goal_checks(results: Sequence[RoundResult], streams: int) -> list[GoalCheck]:
    """Every rival measured at `streams` alongside ours, in RIVAL_GOALS' order."""
    measured = {(r.server, r.logprobs, r.streams) for r in results}
    checks = []
    for goals in RIVAL_GOALS:
        ours, theirs = ("ours", goals.logprobs), (goals.rival, goals.logprobs)
        if {(*ours, streams), (*theirs, streams)} - measured:
            continue
        label = f"ours ({logprobs_label(goals.logprobs)}) / {goals.rival} ({logprobs_label(goals.logprobs)})"
        cpu = paired_ratios(results, ours, theirs, streams, "api_cpu_us_per_token")
        checks.append(median_check(f"API CPU per token, {label}", cpu, goals.api_cpu_goal, at_most(goals.api_cpu_limit)))
        if goals.engine_cpu_limit is not None:
            engine = paired_ratios(results, ours, theirs, streams, "engine_cpu_us_per_token")
            engine_goal = f"≤ {goals.engine_cpu_limit:g}"
            checks.append(median_check(f"engine processes' CPU per token, {label}", engine, engine_goal, at_most(goals.engine_cpu_limit)))
        speed = paired_ratios(results, ours, theirs, streams, "tokens_per_second")
        checks += [
            median_check(f"tokens/s, {label}", speed, "≥ 1", lambda value: value >= 1.0),
            pooled_ttft_check(results, ours, theirs, streams, 50, "≤ 1", f"TTFT p50, {label}"),
            pooled_ttft_check(results, ours, theirs, streams, 99, "≤ 1", f"TTFT p99, {label}"),
        ]
    return checks


def goal_streams(settings: Settings) -> int:
    """The goals are stated at 64 streams; other runs check at their highest concurrency."""
    return 64 if 64 in settings.concurrencies else max(settings.concurrencies)
