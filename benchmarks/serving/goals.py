"""The goals, judged at each concurrency: ours against each rival, like for like.

CPU and speed are judged on the median of ours-over-theirs ratios formed within each cycle: this
machine's speed drifts by 10-15% over minutes, and the drift cancels within a cycle. TTFT is judged
on percentiles over every cycle's samples: one cycle's tail is one or two draws of the engine's
prefill cascade (see measurement.measure_ttft).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from statistics import median

from benchmarks.serving.kinds import OFFLINE
from benchmarks.serving.round_result import RoundResult
from benchmarks.serving.summary import percentile, pooled_ttfts
from benchmarks.serving.workload import logprobs_label

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
