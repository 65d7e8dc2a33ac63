"""Replay benchmark: enforced replays, mixed logprobs modes and ValidateInference against plain generation.

It starts this server once (`python -m server`, the embedded model, the serving benchmark's engine
flags: --max-num-seqs 128 and the rest of benchmarks/serving/settings.py) and measures three
comparisons, each side by side: every configuration gets an untimed warm-up, then --repeats cycles in
which each configuration runs one measured round, in an order rotated from cycle to cycle. Figures
are medians over the cycles; comparisons are the median of the ratios formed within each cycle (this
machine's speed drifts by 10-15% over minutes; the drift cancels within a cycle).

Every stream: token-id input (the same 7-token prompt), exactly --tokens tokens (ignore_eos),
temperature 0.99, a distinct seed per stream, top-5 logprobs. Tokens/s of a round: all its tokens
over the time from sending the first request to the last token's arrival. Decode tokens/s: the
tokens that arrived after every stream had its first token (the prefill steps over), over the time
from then to the last token; parts 1 and 2 compare these.

1. Enforced replay against plain generation, 64 concurrent streams: the plain generations are run once
   first (untimed, the reference); each replay enforces exactly the tokens its stream's reference
   produced, with the same seed and settings. Goal line: replay decode tokens/s >= 0.95 x plain (a
   replay costs at most 5% more).
2. Mixed logprobs modes, 64 concurrent streams: all "processed", all "raw", and half each (alternate
   rows); the same seeds in all three. Printed: the cost of mixing (mixed against the mean of the two
   homogeneous batches) and raw against processed (expected ~1: a batch whose rows share one mode
   runs vLLM's unmodified path).
3. ValidateInference: --items generations of --validate-tokens tokens are recorded first with plain
   Generate (chain_top_logprobs, processed mode); then one ValidateInference call with all of them
   (threshold 0.94, timed from sending it to the last verdict) is compared with the same --items
   recording requests run again as concurrent Generate streams (first sent to last token).

It prints figures and asserts nothing about speed; it fails only when the server misbehaves (an RPC
error, a stream short of tokens or logprobs, a replay that does not deliver its enforced tokens, a
validation verdict that is not a pass). Usage, from the repository root:

    .venv/bin/python benchmarks/replay_bench.py
    .venv/bin/python benchmarks/replay_bench.py --repeats 1 --tokens 16 --items 20 --validate-tokens 16 --json out.json
    # a GPU host (docs/gpu.md), the Qwen3-8B shape with random weights:
    python3 benchmarks/replay_bench.py --model .build/models/qwen3-8b-shape \
        --server-flags "--load-format dummy --gpu-memory-utilization 0.85"
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from statistics import mean, median
from typing import Any, TypeVar

# Run as a script, only benchmarks/ is on the path; tests/support (the server launcher, not an
# installed package) and benchmarks.serving are found from the repository root.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.serving.settings import (
    DEFAULT_MODEL,
    ENGINE_ENV,
    ENGINE_FLAGS,
    BenchmarkError,
    machine_description,
    progress,
)
from gonka.mlnode.client import AsyncInferenceClient, Generation, ServerError, build_request, inference_item
from gonka.mlnode.v1 import inference_pb2 as pb
from gonka.mlnode.v1 import validation_pb2 as vpb
from tests.support.server_process import engine_environment, start_server

STREAMS = 64
TOP_LOGPROBS = 5
TEMPERATURE = 0.99
THRESHOLD = 0.94
# Any ids in the vocabulary do: the prompt only has to be short (all prompts of a round fit one step).
PROMPT_IDS = (9707, 1879, 11, 419, 374, 264, 1273)
# Each part has its own seeds, the same for every configuration of that part.
REPLAY_SEED_BASE = 1
MODES_SEED_BASE = 1_001
VALIDATE_SEED_BASE = 10_001
WARMUP_SEED_BASE = 100_000
# Enough for first-use code paths, the batch shapes and gRPC's flow-control windows.
WARMUP_TOKENS = 16
# Parts 1 and 2 compare decode tokens/s: a round needs tokens after every stream's first one.
MIN_TOKENS = 4
VALIDATE_WARMUP_ITEMS = 8
MAX_VALIDATE_ITEMS = 1024  # the server's limit per call
REPLAY_GOAL = 0.95  # replay decode tokens/s over plain decode tokens/s
REPLAY_GOAL_PERCENT = 5  # the goal as stated: "a replay costs at most 5% more"
DEPLOYED_FORK_REPLAY_TIME = 1.76  # the deployed fork's replay time over plain, on this kind of machine
MIXED_MODES = tuple("raw" if index % 2 else "processed" for index in range(STREAMS))  # rows interleave
RPC_TIMEOUT_SECONDS = 900.0
STOP_TIMEOUT_SECONDS = 30.0

T = TypeVar("T")


@dataclass
class TimedStream:
    """One Generate stream as this client saw it: when it was sent, when its tokens arrived, its content."""

    sent_at: float
    arrivals: list[tuple[float, int]] = field(default_factory=list)  # (perf_counter, tokens in the message)
    generation: Generation = field(default_factory=Generation)

    @property
    def first_at(self) -> float:
        return self.arrivals[0][0]

    @property
    def last_at(self) -> float:
        return self.arrivals[-1][0]


@dataclass(frozen=True)
class Timing:
    """One round's clock. Decode: from the moment every stream had its first token (prefill over) to the last token."""

    wall_seconds: float  # first request sent to last token (or verdict) received
    first_tokens_seconds: float | None = None  # first request sent to the last stream's first token
    decode_seconds: float | None = None
    decode_tokens: int | None = None  # tokens that arrived within the decode window


@dataclass(frozen=True)
class Round:
    """One measured round of one configuration."""

    part: str
    config: str
    cycle: int  # from 0
    units: int  # streams, or items of one ValidateInference call
    tokens: int
    wall_seconds: float
    tokens_per_second: float
    units_per_second: float
    first_tokens_seconds: float | None
    decode_tokens_per_second: float | None


def make_round(part: str, config: str, cycle: int, units: int, tokens: int, timing: Timing) -> Round:
    wall = timing.wall_seconds
    decode = timing.decode_tokens / timing.decode_seconds if timing.decode_tokens and timing.decode_seconds else None
    return Round(
        part, config, cycle, units, tokens, wall, tokens / wall, units / wall, timing.first_tokens_seconds, decode
    )


@dataclass(frozen=True)
class Config:
    """A configuration of one part: `run` performs one round, checks it and returns its clock."""

    name: str
    units: int
    tokens: int
    run: Callable[[], Awaitable[Timing]]


@dataclass(frozen=True)
class Comparison:
    """A ratio formed within each cycle; judged (when it has a goal) on the median of the cycles."""

    description: str
    per_cycle: tuple[float, ...]
    expectation: str
    goal: Callable[[float], bool] | None = None

    @property
    def value(self) -> float | None:
        return median(self.per_cycle) if self.per_cycle else None  # None: no cycle had both figures

    @property
    def met(self) -> bool | None:
        return None if self.goal is None or self.value is None else self.goal(self.value)

    def line(self) -> str:
        if self.value is None:
            return f"- {self.description}: n/a (no cycle gave both figures); {self.expectation}"
        each = ", ".join(f"{value:.3f}" for value in self.per_cycle)
        verdict = "" if self.met is None else (": met" if self.met else ": NOT met")
        figures = f"{self.value:.3f} (median of {len(self.per_cycle)} per-cycle ratios: {each})"
        return f"- {self.description}: {figures}; {self.expectation}{verdict}"

    def record(self) -> dict[str, Any]:
        return {
            "description": self.description,
            "value": self.value,
            "per_cycle": list(self.per_cycle),
            "expectation": self.expectation,
            "met": self.met,
        }


@dataclass(frozen=True)
class ReplayChecks:
    replays_exact: bool  # every replay delivered exactly its enforced tokens (else the run failed)
    plain_matching_reference: tuple[int, ...]  # per timed plain round: streams whose tokens equalled the reference
    largest_logprob_difference: float  # replay against reference, sampled tokens' logprobs


@dataclass(frozen=True)
class ModeChecks:
    streams_same_tokens: int  # streams whose tokens were identical in all three configurations
    # None when no stream had the same tokens in all three:
    raw_vs_processed: (
        float | None
    )  # largest |raw - processed| sampled-token logprob of one stream: how far the modes differ
    mixed_vs_own_mode: float | None  # largest |mixed row - the homogeneous batch of its mode|
    mixed_rows_closer_to_own_mode: int  # of streams_same_tokens


@dataclass(frozen=True)
class VerdictFigures:
    calls: int
    items_per_call: int
    all_passed: bool  # else the run failed
    lowest_similarity: float
    modes: tuple[str, ...]


@dataclass(frozen=True)
class PartResult:
    rounds: list[Round]
    comparisons: list[Comparison]
    checks: Any


# ---------------------------------------------------------------- streams


def generation_request(
    seed: int, tokens: int, *, mode: str | None = None, enforced: Sequence[int] | None = None, chain: bool = False
) -> pb.GenerateRequest:
    return build_request(
        token_ids=PROMPT_IDS,
        max_tokens=tokens,
        temperature=TEMPERATURE,
        seed=seed,
        ignore_eos=True,
        top_logprobs=TOP_LOGPROBS,
        logprobs_mode=mode,
        enforced_token_ids=enforced,
        chain_top_logprobs=chain,
    )


async def timed_stream(client: AsyncInferenceClient, request: pb.GenerateRequest) -> TimedStream:
    timed = TimedStream(time.perf_counter())
    try:
        async for response in client.stream(request, timeout=RPC_TIMEOUT_SECONDS):
            if response.tokens.ids:
                timed.arrivals.append((time.perf_counter(), len(response.tokens.ids)))
            timed.generation.add(response)
    except ServerError as error:
        raise BenchmarkError(f"Generate failed: {error}") from None
    return timed


def stream_problems(generation: Generation, tokens: int, chain: bool) -> list[str]:
    """What a complete stream of `tokens` tokens with top-k (and chain) lists lacks."""
    if not generation.outputs:
        return ["no output"]
    output = generation.first
    columns = output.logprobs
    problems = []
    if output.finish_reason != "length":
        problems.append(f"finished {output.finish_reason!r}, not 'length'")
    if len(output.token_ids) != tokens:
        problems.append(f"{len(output.token_ids)} tokens, not {tokens}")
    if len(columns.logprobs) != len(output.token_ids) or len(columns.top_ids) != len(output.token_ids):
        problems.append(
            f"{len(columns.logprobs)} logprobs and {len(columns.top_ids)} top lists for {len(output.token_ids)} tokens"
        )
    if any(len(top) != TOP_LOGPROBS for top in columns.top_ids):
        problems.append(f"a top list without {TOP_LOGPROBS} entries")
    if chain and (
        len(columns.chain_top) != len(output.token_ids) or any(len(top) != TOP_LOGPROBS for top in columns.chain_top)
    ):
        problems.append("incomplete chain lists")
    return problems


async def run_streams(
    client: AsyncInferenceClient, label: str, requests: Sequence[pb.GenerateRequest], tokens: int, chain: bool = False
) -> tuple[Timing, list[Generation]]:
    """All requests at once; returns the round's clock and the generations."""
    streams = await asyncio.gather(*(timed_stream(client, request) for request in requests))
    for index, stream in enumerate(streams):
        problems = stream_problems(stream.generation, tokens, chain)
        if problems:
            raise BenchmarkError(f"{label}: stream {index}: {'; '.join(problems)}")
    return streams_timing(streams), [stream.generation for stream in streams]


def streams_timing(streams: Sequence[TimedStream]) -> Timing:
    sent = min(stream.sent_at for stream in streams)
    decoding_from = max(stream.first_at for stream in streams)  # every stream past its prefill
    last = max(stream.last_at for stream in streams)
    decoded = sum(count for stream in streams for at, count in stream.arrivals if at > decoding_from)
    return Timing(last - sent, decoding_from - sent, last - decoding_from, decoded)


def largest_logprob_difference(a: Generation, b: Generation) -> float:
    return max((abs(x - y) for x, y in zip(a.first.logprobs.logprobs, b.first.logprobs.logprobs)), default=0.0)


# ---------------------------------------------------------------- cycles


def rotated(items: Sequence[T], shift: int) -> list[T]:
    """Each cycle starts one configuration later, so that none always runs first or last."""
    shift %= len(items)
    return [*items[shift:], *items[:shift]]


async def run_cycles(part: str, configs: Sequence[Config], repeats: int) -> list[Round]:
    rounds = []
    for cycle in range(repeats):
        for config in rotated(configs, cycle):
            measured = make_round(part, config.name, cycle, config.units, config.tokens, await config.run())
            decode = (
                ""
                if measured.decode_tokens_per_second is None
                else f", decode {measured.decode_tokens_per_second:.0f} tok/s"
            )
            progress(
                f"{part}: {config.name}, cycle {cycle + 1}: {measured.tokens_per_second:.0f} tok/s{decode}, wall {measured.wall_seconds:.2f}s"
            )
            rounds.append(measured)
    return rounds


def per_cycle(rounds: Sequence[Round], config: str, metric: str = "tokens_per_second") -> dict[int, float]:
    """Cycles without the figure (a round too short for a decode window) are left out."""
    return {r.cycle: getattr(r, metric) for r in rounds if r.config == config and getattr(r, metric) is not None}


def ratios(
    rounds: Sequence[Round], numerator: str, denominator: str, metric: str = "tokens_per_second"
) -> tuple[float, ...]:
    top, bottom = per_cycle(rounds, numerator, metric), per_cycle(rounds, denominator, metric)
    return tuple(top[cycle] / bottom[cycle] for cycle in sorted(top.keys() & bottom.keys()))


# ---------------------------------------------------------------- part 1: replay against plain


async def replay_part(client: AsyncInferenceClient, tokens: int, repeats: int) -> PartResult:
    seeds = range(REPLAY_SEED_BASE, REPLAY_SEED_BASE + STREAMS)
    plain = [generation_request(seed, tokens) for seed in seeds]
    progress(f"part 1: {STREAMS} reference plain generations (untimed)")
    _, reference = await run_streams(client, "plain (reference)", plain, tokens)
    replays = [generation_request(seed, tokens, enforced=ref.first.token_ids) for seed, ref in zip(seeds, reference)]
    matching: list[int] = []
    differences: list[float] = []

    async def plain_round() -> Timing:
        timing, generations = await run_streams(client, "plain", plain, tokens)
        # Not a failure: the same seeds in the same batch shapes should, but need not, give the same tokens.
        matching.append(sum(g.first.token_ids == ref.first.token_ids for g, ref in zip(generations, reference)))
        return timing

    async def replay_round() -> Timing:
        timing, generations = await run_streams(client, "replay", replays, tokens)
        require_enforced(generations, reference)
        differences.append(max(largest_logprob_difference(g, ref) for g, ref in zip(generations, reference)))
        return timing

    progress("part 1: warm-up replay round (untimed)")
    await replay_round()
    configs = [
        Config("plain", STREAMS, STREAMS * tokens, plain_round),
        Config("replay", STREAMS, STREAMS * tokens, replay_round),
    ]
    rounds = await run_cycles("replay", configs, repeats)
    comparisons = [
        Comparison(
            "replay decode tokens/s over plain decode tokens/s",
            ratios(rounds, "replay", "plain", "decode_tokens_per_second"),
            f"goal ≥ {REPLAY_GOAL} (a replay costs at most {REPLAY_GOAL_PERCENT}% more)",
            lambda value: value >= REPLAY_GOAL,
        ),
        Comparison(
            "replay time over plain time (whole round, prefill included)",
            ratios(rounds, "replay", "plain", "wall_seconds"),
            f"context: the deployed fork's replay took {DEPLOYED_FORK_REPLAY_TIME}x plain on this kind of machine",
        ),
    ]
    return PartResult(rounds, comparisons, ReplayChecks(True, tuple(matching), max(differences)))


def require_enforced(replays: Sequence[Generation], reference: Sequence[Generation]) -> None:
    for index, (replay, ref) in enumerate(zip(replays, reference)):
        if replay.first.token_ids != ref.first.token_ids:
            at = next(i for i, (a, b) in enumerate(zip(replay.first.token_ids, ref.first.token_ids)) if a != b)
            raise BenchmarkError(
                f"replay: stream {index} delivered token {replay.first.token_ids[at]} at position {at}, "
                f"not the enforced {ref.first.token_ids[at]}"
            )


# ---------------------------------------------------------------- part 2: mixed logprobs modes


async def modes_part(client: AsyncInferenceClient, tokens: int, repeats: int) -> PartResult:
    layouts = {"processed": ("processed",) * STREAMS, "raw": ("raw",) * STREAMS, "mixed": MIXED_MODES}
    latest: dict[str, list[Generation]] = {}

    def config(name: str, modes: Sequence[str]) -> Config:
        requests = [generation_request(MODES_SEED_BASE + index, tokens, mode=mode) for index, mode in enumerate(modes)]

        async def run() -> Timing:
            timing, latest[name] = await run_streams(client, f"modes {name}", requests, tokens)
            return timing

        return Config(name, STREAMS, STREAMS * tokens, run)

    warmup_tokens = min(WARMUP_TOKENS, tokens)
    for name, modes in layouts.items():
        progress(f"part 2: warm-up round, {name} (untimed)")
        requests = [
            generation_request(WARMUP_SEED_BASE + index, warmup_tokens, mode=mode) for index, mode in enumerate(modes)
        ]
        await run_streams(client, f"modes {name} (warm-up)", requests, warmup_tokens)
    rounds = await run_cycles("modes", [config(name, modes) for name, modes in layouts.items()], repeats)
    mixing = mixing_ratios(rounds)
    comparisons = [
        Comparison(
            "mixed decode tokens/s over the mean of all-raw and all-processed decode tokens/s",
            mixing,
            mixing_cost(mixing),
        ),
        Comparison(
            "all-raw decode tokens/s over all-processed decode tokens/s",
            ratios(rounds, "raw", "processed", "decode_tokens_per_second"),
            "expected ≈ 1 (a batch whose rows share one mode runs vLLM's unmodified path)",
        ),
    ]
    return PartResult(rounds, comparisons, mode_checks(latest["processed"], latest["raw"], latest["mixed"]))


def mixing_cost(mixing: Sequence[float]) -> str:
    if not mixing:
        return "cost of mixing: n/a"
    return f"cost of mixing: {(1 / median(mixing) - 1) * 100:+.1f}% time (from the median ratio)"


def mixing_ratios(rounds: Sequence[Round]) -> tuple[float, ...]:
    mixed, raw, processed = (
        per_cycle(rounds, name, "decode_tokens_per_second") for name in ("mixed", "raw", "processed")
    )
    return tuple(
        mixed[cycle] / mean((raw[cycle], processed[cycle]))
        for cycle in sorted(mixed.keys() & raw.keys() & processed.keys())
    )


def mode_checks(processed: Sequence[Generation], raw: Sequence[Generation], mixed: Sequence[Generation]) -> ModeChecks:
    """From each configuration's last round: did every mixed row report its own mode's logprobs?"""
    same = [
        i for i in range(STREAMS) if processed[i].first.token_ids == raw[i].first.token_ids == mixed[i].first.token_ids
    ]
    homogeneous = {"processed": processed, "raw": raw}
    own = [largest_logprob_difference(mixed[i], homogeneous[MIXED_MODES[i]][i]) for i in same]
    other_mode = {"processed": "raw", "raw": "processed"}
    other = [largest_logprob_difference(mixed[i], homogeneous[other_mode[MIXED_MODES[i]]][i]) for i in same]
    return ModeChecks(
        streams_same_tokens=len(same),
        raw_vs_processed=max((largest_logprob_difference(raw[i], processed[i]) for i in same), default=None),
        mixed_vs_own_mode=max(own, default=None),
        mixed_rows_closer_to_own_mode=sum(a < b for a, b in zip(own, other)),
    )


# ---------------------------------------------------------------- part 3: ValidateInference


async def validate_part(client: AsyncInferenceClient, items: int, tokens: int, repeats: int) -> PartResult:
    seeds = range(VALIDATE_SEED_BASE, VALIDATE_SEED_BASE + items)
    recording = [generation_request(seed, tokens, mode="processed", chain=True) for seed in seeds]
    progress(f"part 3: recording {items} generations of {tokens} tokens (untimed)")
    _, records = await run_streams(client, "recording", recording, tokens, chain=True)
    batch = [executor_item(seed, tokens, record) for seed, record in zip(seeds, records)]
    verdicts: list[list[vpb.InferenceVerdict]] = []

    async def validate_round() -> Timing:
        timing, judged = await validate_all(client, batch, tokens)
        verdicts.append(judged)
        return timing

    async def plain_round() -> Timing:
        timing, _ = await run_streams(client, "plain (validation's work)", recording, tokens, chain=True)
        return Timing(timing.wall_seconds)  # compared whole: a ValidateInference call has no decode window

    progress(f"part 3: warm-up ValidateInference of {min(VALIDATE_WARMUP_ITEMS, items)} items (untimed)")
    await validate_all(client, batch[:VALIDATE_WARMUP_ITEMS], tokens)
    configs = [
        Config("ValidateInference", items, items * tokens, validate_round),
        Config("plain", items, items * tokens, plain_round),
    ]
    rounds = await run_cycles("validate", configs, repeats)
    comparisons = [
        Comparison(
            "ValidateInference tokens/s over plain Generate tokens/s of the same work",
            ratios(rounds, "ValidateInference", "plain"),
            "for the record (no goal)",
        )
    ]
    return PartResult(rounds, comparisons, verdict_figures(verdicts))


def executor_item(seed: int, tokens: int, record: Generation) -> vpb.InferenceItem:
    """What an executor was asked (no chain lists: the servicer asks for its own) and what it recorded."""
    request = generation_request(seed, tokens, mode="processed")
    output = record.first
    return inference_item(request, output.token_ids, output.logprobs.chain_top, threshold=THRESHOLD, mode="processed")


async def validate_all(
    client: AsyncInferenceClient, items: list[vpb.InferenceItem], tokens: int
) -> tuple[Timing, list[vpb.InferenceVerdict]]:
    """One call with every item; its clock (sent to last verdict) and the verdicts in item order."""
    responses = []
    started = time.perf_counter()
    try:
        async for response in client.validate_inference(items, timeout=RPC_TIMEOUT_SECONDS):
            responses.append(response)
    except ServerError as error:
        raise BenchmarkError(f"ValidateInference failed: {error}") from None
    wall = time.perf_counter() - started
    return Timing(wall), require_all_passed(responses, len(items), tokens)


def require_all_passed(
    responses: Sequence[vpb.ValidateInferenceResponse], count: int, tokens: int
) -> list[vpb.InferenceVerdict]:
    by_index = {response.index: response for response in responses}
    if len(responses) != count or sorted(by_index) != list(range(count)):
        raise BenchmarkError(f"ValidateInference: {len(responses)} answers covering {len(by_index)} of {count} items")
    problems = {index: verdict_problem(by_index[index], tokens) for index in range(count)}
    failures = [f"item {index}: {problem}" for index, problem in problems.items() if problem]
    if failures:
        listed = "\n".join(failures[:10])
        raise BenchmarkError(
            f"ValidateInference: {len(failures)} of {count} items did not pass (the server's own outputs):\n{listed}"
        )
    return [by_index[index].verdict for index in range(count)]


def verdict_problem(response: vpb.ValidateInferenceResponse, tokens: int) -> str | None:
    if response.WhichOneof("outcome") != "verdict":
        error = response.error
        return f"error {error.code} {error.reason} field {error.field!r}: {error.message}"
    verdict = response.verdict
    if verdict.passed and verdict.replayed_tokens == tokens:
        return None
    return (
        f"passed={verdict.passed} failure {vpb.InferenceFailure.Name(verdict.failure)}, similarity {verdict.similarity:.4f}, "
        f"{verdict.replayed_tokens} tokens replayed of {tokens}, first differing position {verdict.first_differing_position}"
    )


def verdict_figures(calls: Sequence[Sequence[vpb.InferenceVerdict]]) -> VerdictFigures:
    every = [verdict for call in calls for verdict in call]
    modes = sorted({pb.LogprobsMode.Name(verdict.mode) for verdict in every})
    return VerdictFigures(len(calls), len(calls[0]), True, min(verdict.similarity for verdict in every), tuple(modes))


# ---------------------------------------------------------------- the run


@dataclass(frozen=True)
class Results:
    replay: PartResult
    modes: PartResult
    validate: PartResult


async def measure(target: str, args: argparse.Namespace) -> Results:
    async with AsyncInferenceClient(target) as client:
        replay = await replay_part(client, args.tokens, args.repeats)
        modes = await modes_part(client, args.tokens, args.repeats)
        validate = await validate_part(client, args.items, args.validate_tokens, args.repeats)
    return Results(replay, modes, validate)


def server_flags(model: Path, extra: str) -> list[str]:
    # The extra flags come last: a flag given twice takes its last value.
    return ["--model", str(model), *ENGINE_FLAGS, *shlex.split(extra)]


def server_env() -> dict[str, str]:
    env = engine_environment()
    env.update(ENGINE_ENV)  # the serving benchmark's KV cache size
    return env


# ---------------------------------------------------------------- the report


def summary_table(part: PartResult, unit: str | None = None) -> str:
    """Per configuration: medians over the cycles, and the headline figure of each cycle."""
    decoding = all(r.decode_tokens_per_second is not None for r in part.rounds)
    headline = "decode_tokens_per_second" if decoding else "tokens_per_second"
    columns = ["configuration", "rounds", "tokens/round", "wall s", "tokens/s"]
    columns += ["all first tokens s", "decode tokens/s"] if decoding else []
    columns += [f"{unit}/s"] if unit else []
    columns += [f"{'decode ' if decoding else ''}tokens/s per cycle"]
    lines = ["| " + " | ".join(columns) + " |", "|---|" + "---:|" * (len(columns) - 2) + "---|"]
    for name in dict.fromkeys(r.config for r in part.rounds):
        rounds = [r for r in part.rounds if r.config == name]

        def mid(metric: str, rounds: list[Round] = rounds) -> float:
            return median(getattr(r, metric) for r in rounds)

        cells = [
            name,
            str(len(rounds)),
            str(rounds[0].tokens),
            f"{mid('wall_seconds'):.2f}",
            f"{mid('tokens_per_second'):.0f}",
        ]
        cells += [f"{mid('first_tokens_seconds'):.2f}", f"{mid('decode_tokens_per_second'):.0f}"] if decoding else []
        cells += [f"{mid('units_per_second'):.1f}"] if unit else []
        cells += [", ".join(f"{getattr(r, headline):.0f}" for r in rounds)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def optional(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2e}"


def replay_section(part: PartResult, args: argparse.Namespace) -> list[str]:
    checks: ReplayChecks = part.checks
    matching = ", ".join(f"{count}/{STREAMS}" for count in checks.plain_matching_reference)
    return [
        f"### 1. Enforced replay against plain generation ({STREAMS} concurrent streams of {args.tokens} tokens)",
        "",
        summary_table(part),
        "",
        *(comparison.line() for comparison in part.comparisons),
        (
            f"- every replay delivered exactly its enforced tokens; largest |logprob| difference of a replayed token from "
            f"the reference: {checks.largest_logprob_difference:.2e}"
        ),
        f"- timed plain rounds that reproduced the reference tokens (same seeds): {matching}",
    ]


def modes_section(part: PartResult, args: argparse.Namespace) -> list[str]:
    checks: ModeChecks = part.checks
    return [
        f"### 2. Mixed logprobs modes ({STREAMS} concurrent streams of {args.tokens} tokens, top-{TOP_LOGPROBS}; mixed: alternate rows raw / processed)",
        "",
        summary_table(part),
        "",
        *(comparison.line() for comparison in part.comparisons),
        (
            f"- last round of each: {checks.streams_same_tokens}/{STREAMS} streams had the same tokens in all three; of those, "
            f"mixed rows closer to their own mode's homogeneous batch than to the other's: {checks.mixed_rows_closer_to_own_mode}; "
            f"largest |logprob| difference mixed row vs its own mode's batch: {optional(checks.mixed_vs_own_mode)} "
            f"(raw vs processed of one stream: up to {optional(checks.raw_vs_processed)})"
        ),
    ]


def validate_section(part: PartResult, args: argparse.Namespace) -> list[str]:
    figures: VerdictFigures = part.checks
    return [
        f"### 3. ValidateInference ({args.items} items of {args.validate_tokens} tokens, threshold {THRESHOLD}) against plain Generate",
        "",
        (
            "`ValidateInference`: one call with every item, timed from sending it to the last verdict. `plain`: the same "
            f"{args.items} recording requests (top-{TOP_LOGPROBS}, processed, chain lists) as concurrent Generate streams."
        ),
        "",
        summary_table(part, unit="items"),
        "",
        *(comparison.line() for comparison in part.comparisons),
        (
            f"- verdicts: all {figures.items_per_call} items passed in each of {figures.calls} timed call(s); lowest similarity "
            f"{figures.lowest_similarity:.6f}; replay mode {', '.join(figures.modes)} (stated in the items)"
        ),
    ]


def report(results: Results, args: argparse.Namespace, machine: dict[str, Any], wall: float) -> str:
    engine = (
        shlex.join(server_flags(args.model, args.server_flags))
        + " "
        + " ".join(f"{k}={v}" for k, v in ENGINE_ENV.items())
    )
    lines = [
        "## Replay benchmark",
        "",
        (
            f"- machine: {machine['cpu']}, {machine['cores']} cores ({machine['usable_cores']} usable), "
            f"{machine['memory_gib']} GiB; {machine['platform']}"
        ),
        f"- software: {machine['vllm']}, grpcio {machine['grpcio']}, Python {machine['python']}",
        f"- command: {shlex.join(sys.orig_argv)}",
        f"- server: python -m server {engine}",
        (
            f"- streams: token-id prompt ({len(PROMPT_IDS)} tokens), ignore_eos, temperature {TEMPERATURE}, a distinct seed "
            f"per stream, top-{TOP_LOGPROBS} logprobs; tokens/s = a round's tokens over first request sent to last token received; "
            "decode tokens/s = the tokens that arrived after every stream had its first token (the prefill steps over), "
            "over that window"
        ),
        (
            f"- measuring: per part an untimed warm-up, then {args.repeats} cycle(s) of one measured round per configuration, "
            "the order rotated per cycle; figures are medians over the cycles, comparisons medians of per-cycle ratios"
        ),
        f"- whole run: {wall / 60:.1f} min",
        "",
        *replay_section(results.replay, args),
        "",
        *modes_section(results.modes, args),
        "",
        *validate_section(results.validate, args),
    ]
    return "\n".join(lines)


def part_record(part: PartResult) -> dict[str, Any]:
    return {
        "rounds": [asdict(r) for r in part.rounds],
        "comparisons": [comparison.record() for comparison in part.comparisons],
        "checks": asdict(part.checks),
    }


def json_document(
    results: Results, args: argparse.Namespace, machine: dict[str, Any], wall: float, log_path: Path
) -> dict[str, Any]:
    return {
        "command": shlex.join(sys.orig_argv),
        "machine": machine,
        "server_flags": server_flags(args.model, args.server_flags),
        "engine_env": dict(ENGINE_ENV),
        "settings": {
            "streams": STREAMS,
            "tokens": args.tokens,
            "items": args.items,
            "validate_tokens": args.validate_tokens,
            "repeats": args.repeats,
            "prompt_token_ids": list(PROMPT_IDS),
            "temperature": TEMPERATURE,
            "top_logprobs": TOP_LOGPROBS,
            "threshold": THRESHOLD,
        },
        "replay": part_record(results.replay),
        "modes": part_record(results.modes),
        "validate": part_record(results.validate),
        "wall_seconds": wall,
        "server_log": str(log_path),
    }


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="measured cycles per part; figures are their medians (default: %(default)s)",
    )
    parser.add_argument(
        "--tokens", type=int, default=64, help="tokens per stream in parts 1 and 2 (default: %(default)s)"
    )
    parser.add_argument(
        "--items", type=int, default=200, help="ValidateInference items in part 3 (default: %(default)s)"
    )
    parser.add_argument(
        "--validate-tokens", type=int, default=128, help="tokens per item in part 3 (default: %(default)s)"
    )
    parser.add_argument(
        "--model", type=Path, default=DEFAULT_MODEL, help="model directory (default: the embedded model)"
    )
    parser.add_argument(
        "--server-flags",
        default="",
        help="more server and vLLM flags, one string (a GPU host: --load-format dummy ...)",
    )
    parser.add_argument("--json", type=Path, help="also write the full results as JSON here")
    args = parser.parse_args(argv)
    if min(args.repeats, args.items, args.validate_tokens) < 1:
        parser.error("--repeats, --items and --validate-tokens must be positive")
    if args.tokens < MIN_TOKENS:
        parser.error(
            f"--tokens: at least {MIN_TOKENS}, so that every round has a decode window after its prefill steps"
        )
    if args.items > MAX_VALIDATE_ITEMS:
        parser.error(f"--items: the server takes at most {MAX_VALIDATE_ITEMS} items per ValidateInference call")
    if not (args.model / "config.json").is_file():
        parser.error(f"--model: no model at {args.model} (build the embedded one with `make model`)")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    machine = machine_description()
    log_path = Path(tempfile.mkdtemp(prefix="replay-bench-")) / "server.log"
    progress(f"starting python -m server {shlex.join(server_flags(args.model, args.server_flags))} (log: {log_path})")
    try:
        server = start_server(log_path, server_flags(args.model, args.server_flags), env=server_env())
    except (RuntimeError, TimeoutError) as error:
        progress(f"FAILED: the server did not start:\n{error}")
        return 1
    try:
        results = asyncio.run(measure(server.target, args))
    except BenchmarkError as error:
        progress(f"FAILED: {error}\n--- last lines of {log_path} ---\n{server.log_tail(40)}")
        return 1
    finally:
        server.stop(timeout=STOP_TIMEOUT_SECONDS)
    wall = time.monotonic() - started
    print(report(results, args, machine, wall), flush=True)
    if args.json:
        args.json.write_text(json.dumps(json_document(results, args, machine, wall, log_path), indent=2) + "\n")
        progress(f"results written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
