"""Study: can one forward over prompt + output replace the step-by-step (decode) replay of ValidateInference?

A replay knows every token in advance, so one prefill over prompt + executor tokens with prompt logprobs
gives every output position's distribution at once. This script measures, on the peaked embedded model
(`.build/models/qwen3-tiny-peaked`, output head x32: on the random-weight model every similarity is near 1
and proves nothing), how such a "one-forward" replay compares with the decode replay that
ValidateInference runs, per logprobs mode (../shared/spec/inference-validation.md), and how much faster it is.

It starts ONE server (the peaked model and the test suite's SHARED_SERVER_FLAGS) and:
1. records executor outputs with Generate (chain_top_logprobs): both logprobs modes x five sampling
   settings (greedy, temperature 0.7 and 1.0 with seeds, top_p 0.9, top_k 20) x --items-per-config
   varied prompts (token ids of varied lengths and texts), --tokens tokens each (ignore_eos), top-5;
   then adds --tampered copies whose logprobs are scaled (factors spread so that the decode replay's
   similarity straddles the threshold), so that verdicts near the threshold are tested too;
2. decode replay: one ValidateInference call over all items (threshold 0.94), timed;
3. one-forward replay: per item ONE Generate over prompt_token_ids = prompt + executor tokens,
   max_tokens 1, prompt_logprobs = the server's maximum (20), at most 128 in flight (as the validator);
   each position's chain list is built as the spec says (engine_ext.generation.chain_lists, engine_ext.generation.logprob_padding)
   and the verdict is the server's own (engine_ext.generation.inference_verdict.judge_inference); timed, the
   client-side list building included.
   - raw mode: exactly the prompt logprobs (both are log_softmax of the float32 logits).
   - processed mode: the contract allows at most 20 prompt logprobs per position (no full vocabulary),
     so the request's temperature, top-k and top-p are applied (in vLLM's order: temperature, then
     top-k, then top-p over the ascending cumulative sum; masked entries -inf, reported -9999.0) to the
     20 best raw logprobs only where that provably gives the full-vocabulary result: greedy, and
     temperature 1 without filters (processed = raw); top-k <= 20 (all else is masked); top-p whose cut
     lies inside the listed tokens whatever the unlisted tail holds; other temperatures when bounds on
     the unlisted tail move the normalizer by at most 1e-6 nats. An item is derivable only when every
     position is; the others are counted, with the reason, and left to the decode replay.
4. untimed, the decode replay's own lists (Generate with the executor's tokens enforced, as
   ValidateInference replays), for the one-forward replay's distance to the decode replay itself.

Printed per mode: items, derivable items, verdicts agreeing with the decode replay, distance of the
one-forward replay to the original (honest items; median, max), |one-forward - decode| distance
(median, max), the direct one-forward-to-decode distance, and whether a two-stage scheme (screen with
one-forward, decode-replay items whose one-forward similarity lies within a margin of the threshold)
agrees on every item, with the smallest margin that does on this data. Then the wall times and the
speed-up (decode replay / one-forward). It asserts nothing about speed; it fails only when the server
misbehaves. Usage, from the repository root:

    .venv/bin/python benchmarks/studies/one_forward_replay.py --json /tmp/one_forward.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from statistics import median
from typing import Any, TypeVar

# Run as a script, only benchmarks/ is on the path; tests/support and engine_ext live at the root.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from engine_ext.consensus import sequence_distance
from engine_ext.consensus.inference_distance import Position
from engine_ext.generation.chain_lists import chain_top_lists
from engine_ext.generation.inference_verdict import judge_inference
from engine_ext.generation.logprob_padding import pad_masked_entries
from engine_ext.generation.outputs import LogprobColumns
from gonka.mlnode.client import AsyncInferenceClient, Generation, build_request, inference_item
from gonka.mlnode.v1 import inference_pb2 as pb
from gonka.mlnode.v1 import validation_pb2 as vpb
from server.embedded_model import PEAKED_MODEL_DIR
from tests.support.server_process import REPO_ROOT, SHARED_SERVER_FLAGS, start_server

MODES = ("raw", "processed")


@dataclass(frozen=True)
class SamplingConfig:
    name: str
    temperature: float
    top_p: float | None = None
    top_k: int | None = None

    def options(self) -> dict[str, Any]:
        return {"temperature": self.temperature, "top_p": self.top_p, "top_k": self.top_k}


CONFIGURATIONS = (
    SamplingConfig("greedy", 0.0),
    SamplingConfig("temperature 0.7", 0.7),
    SamplingConfig("temperature 1.0", 1.0),
    SamplingConfig("top_p 0.9", 1.0, top_p=0.9),
    SamplingConfig("top_k 20", 1.0, top_k=20),
)
TEXT_PROMPTS = (
    "The quick brown fox jumps over the lazy dog.",
    "Write a haiku about the sea.",
    "Explain the difference between a list and a tuple in Python, briefly.",
    "Once upon a time, in a small village by the river,",
    "List three prime numbers greater than one hundred.",
    "What is the capital of Australia?",
    "Translate to French: the weather is lovely today.",
    "def fibonacci(n):",
    "Summarize the plot of a detective story in two sentences.",
    "In 1969, the first humans landed on",
)
THRESHOLD = 0.94  # the chain's threshold for Qwen3-235B today (inference-validation.md 3)
TOP_K = 5  # the network's top_logprobs
MAX_CONCURRENT_REPLAYS = 128  # server/services/validation_servicer.py's bound, so both replays batch alike
GREEDY_EPSILON = 1e-5  # vLLM's _SAMPLING_EPS: below it a row is greedy (no temperature, no filters)
# A top-p cut this close to p may go either way in vLLM's float32 cumulative sum over the vocabulary.
TOP_P_TOLERANCE = 1e-5
# Slack on the mass outside the listed tokens: the listed logprobs are float32 (relative error ~1e-7 each).
TAIL_MASS_SLACK = 1e-6
# A derived processed logprob may be off by at most this (nats) from the full-vocabulary one.
NORMALIZER_TOLERANCE = 1e-6
# Tampered copies scale the executor's logprobs by a factor in this range: with 24 positions the
# distance is diluted by max(100, n) = 100; factors 2.2-4 put the similarity at about 0.955-0.925.
TAMPER_FACTORS = (2.2, 4.0)
TOKEN_PROMPT_LENGTHS = (3, 64)
TOKEN_ID_RANGE = (100, 100_000)  # ordinary tokens of the Qwen3 tokenizer
RPC_TIMEOUT_SECONDS = 900.0
WARMUP_ITEMS = 8

T = TypeVar("T")


class NotDerivable(Exception):
    """Processed logprobs of a position cannot be computed exactly from its listed raw logprobs."""


class ServerMisbehaved(RuntimeError):
    """A reply that breaks the contract (missing logprobs, wrong tokens, an item error)."""


# ---------------------------------------------------------------- executor records


@dataclass(frozen=True)
class ItemSpec:
    mode: str
    config: SamplingConfig
    seed: int
    prompt_ids: tuple[int, ...] | None = None
    prompt_text: str | None = None

    def request(self, tokens: int, **extra: Any) -> pb.GenerateRequest:
        prompt = {"token_ids": list(self.prompt_ids)} if self.prompt_ids is not None else {"prompt": self.prompt_text}
        return build_request(
            **prompt,
            max_tokens=tokens,
            ignore_eos=True,
            seed=self.seed,
            top_logprobs=TOP_K,
            logprobs_mode=self.mode,
            **self.config.options(),
            **extra,
        )


@dataclass(frozen=True)
class Record:
    """What an executor served: the request (as the chain stores it), its prompt as run, tokens and chain lists."""

    spec: ItemSpec
    request: pb.GenerateRequest
    prompt_ids: tuple[int, ...]
    token_ids: tuple[int, ...]
    chain_top: tuple[dict[int, float], ...]


@dataclass(frozen=True)
class Item:
    """One thing to validate: a record, possibly tampered (its logprobs scaled by `tamper_factor`)."""

    record: Record
    proto: vpb.InferenceItem
    tamper_factor: float | None = None

    @property
    def executor_positions(self) -> list[Position]:
        """As the server reads them (float32 on the wire)."""
        positions = self.proto.positions
        k = positions.top_k
        return [
            (token, dict(zip(positions.top_ids[i * k : (i + 1) * k], positions.top_logprobs[i * k : (i + 1) * k])))
            for i, token in enumerate(positions.token_ids)
        ]


def item_specs(items_per_config: int, seed: int) -> list[ItemSpec]:
    """Both modes x every configuration x varied prompts: a third texts, the rest token ids of varied lengths."""
    rng = random.Random(seed)
    specs = []
    for mode in MODES:
        for config in CONFIGURATIONS:
            for index in range(items_per_config):
                request_seed = rng.randrange(1, 2**31)
                if index % 3 == 0:
                    specs.append(ItemSpec(mode, config, request_seed, prompt_text=rng.choice(TEXT_PROMPTS)))
                else:
                    length = rng.randint(*TOKEN_PROMPT_LENGTHS)
                    specs.append(
                        ItemSpec(
                            mode,
                            config,
                            request_seed,
                            prompt_ids=tuple(rng.randrange(*TOKEN_ID_RANGE) for _ in range(length)),
                        )
                    )
    return specs


async def bounded_gather(jobs: Sequence[Callable[[], Awaitable[T]]], limit: int) -> list[T]:
    slots = asyncio.Semaphore(limit)

    async def run(job: Callable[[], Awaitable[T]]) -> T:
        async with slots:
            return await job()

    return list(await asyncio.gather(*(run(job) for job in jobs)))


async def record_one(aio: AsyncInferenceClient, spec: ItemSpec, tokens: int) -> Record:
    generation = await aio.generate(
        spec.request(tokens, chain_top_logprobs=True, include_prompt_token_ids=True), timeout=RPC_TIMEOUT_SECONDS
    )
    output = generation.first
    if len(output.token_ids) != tokens or len(output.logprobs.chain_top) != tokens or not generation.prompt_as_run:
        raise ServerMisbehaved(
            f"executor record short: {len(output.token_ids)} tokens, {len(output.logprobs.chain_top)} lists"
        )
    return Record(
        spec,
        spec.request(tokens),
        tuple(generation.prompt_as_run),
        tuple(output.token_ids),
        tuple(output.logprobs.chain_top),
    )


async def record_all(aio: AsyncInferenceClient, specs: Sequence[ItemSpec], tokens: int) -> list[Record]:
    # All at once, as a busy executor batches requests of every setting together.
    return await bounded_gather([partial(record_one, aio, spec, tokens) for spec in specs], len(specs))


def scaled_lists(chain_top: Sequence[dict[int, float]], factor: float) -> list[dict[int, float]]:
    """A dishonest executor's lists: every logprob scaled (masked -9999.0 entries stay as they are)."""
    return [{token: value if value == -9999.0 else value * factor for token, value in top.items()} for top in chain_top]


def make_item(record: Record, factor: float | None = None) -> Item:
    lists = list(record.chain_top) if factor is None else scaled_lists(record.chain_top, factor)
    proto = inference_item(record.request, record.token_ids, lists, threshold=THRESHOLD, mode=record.spec.mode)
    return Item(record, proto, factor)


def make_items(records: Sequence[Record], tampered: int, seed: int) -> list[Item]:
    """Every record honest, plus `tampered` scaled copies spread over modes, settings and factors."""
    rng = random.Random(seed + 1)
    honest = [make_item(record) for record in records]
    chosen = rng.sample(list(records), min(tampered, len(records)))
    low, high = TAMPER_FACTORS
    factors = [low + (high - low) * index / max(1, len(chosen) - 1) for index in range(len(chosen))]
    rng.shuffle(factors)
    return honest + [make_item(record, factor) for record, factor in zip(chosen, factors)]


# ---------------------------------------------------------------- decode replay (ValidateInference)


@dataclass(frozen=True)
class Verdict:
    distance: float
    similarity: float
    passed: bool


async def decode_replay_verdicts(aio: AsyncInferenceClient, items: Sequence[Item]) -> dict[int, Verdict]:
    verdicts = {}
    async for response in aio.validate_inference([item.proto for item in items], timeout=RPC_TIMEOUT_SECONDS):
        if response.WhichOneof("outcome") != "verdict":
            raise ServerMisbehaved(f"item {response.index}: {response}")
        verdict = response.verdict
        verdicts[response.index] = Verdict(verdict.distance, verdict.similarity, verdict.passed)
    if sorted(verdicts) != list(range(len(items))):
        raise ServerMisbehaved("ValidateInference did not answer every item once")
    return verdicts


async def decode_replay_lists(aio: AsyncInferenceClient, record: Record) -> list[Position]:
    """What ValidateInference compares with (its replay request: enforced tokens, the stated mode)."""
    request = pb.GenerateRequest()
    request.CopyFrom(record.request)
    request.enforced_token_ids.extend(record.token_ids)
    request.logprobs.chain_top_logprobs = True
    output = (await aio.generate(request, timeout=RPC_TIMEOUT_SECONDS)).first
    if tuple(output.token_ids) != record.token_ids:
        raise ServerMisbehaved("an enforced replay did not deliver its enforced tokens")
    return list(zip(output.token_ids, output.logprobs.chain_top))


# ---------------------------------------------------------------- one-forward replay


@dataclass(frozen=True)
class PromptPosition:
    """One output position seen as a prompt position: the token, its raw logprob, the listed best raw logprobs."""

    token: int
    logprob: float
    top: tuple[tuple[int, float], ...]  # best first


@dataclass(frozen=True)
class Filters:
    """The request's sampling transformations as vLLM applies them (unset = vLLM's defaults)."""

    temperature: float
    top_k: int  # 0: off
    top_p: float  # 1.0: off

    @classmethod
    def of(cls, request: pb.GenerateRequest) -> Filters:
        sampling = request.sampling
        temperature = sampling.temperature if sampling.HasField("temperature") else 1.0
        top_k = sampling.top_k if sampling.HasField("top_k") else 0
        top_p = sampling.top_p if sampling.HasField("top_p") else 1.0
        if temperature < GREEDY_EPSILON:
            return cls(0.0, 0, 1.0)  # vLLM's SamplingParams drops top-k/top-p for greedy requests
        return cls(temperature, max(top_k, 0), top_p)

    @property
    def leaves_raw_unchanged(self) -> bool:
        # Greedy rows skip temperature; dividing by 1.0 changes no float.
        return (self.temperature == 0.0 or self.temperature == 1.0) and not self.top_k and self.top_p >= 1.0


def require_derivable_request(request: pb.GenerateRequest) -> None:
    """Penalties, min-p and grammars change processed logprobs in ways this study does not model."""
    sampling = request.sampling
    for name in ("min_p", "presence_penalty", "frequency_penalty", "repetition_penalty"):
        if sampling.HasField(name):
            raise NotDerivable(f"sampling.{name} is set")
    if request.HasField("structured_output"):
        raise NotDerivable("a structured-output constraint is set")


def one_forward_request(record: Record, prompt_logprobs: int) -> pb.GenerateRequest:
    # Greedy, one token: the cheapest generation; only the prompt logprobs (always raw) are used.
    return build_request(
        token_ids=[*record.prompt_ids, *record.token_ids],
        max_tokens=1,
        temperature=0.0,
        prompt_logprobs=prompt_logprobs,
    )


def output_positions(generation: Generation, record: Record) -> list[PromptPosition]:
    """Prompt logprobs cover positions 1..; output position m is prompt position len(prompt) + m."""
    listed = generation.prompt_logprobs
    if listed is None:
        raise ServerMisbehaved("no prompt logprobs in a one-forward reply")
    positions = []
    for m, token in enumerate(record.token_ids):
        index = len(record.prompt_ids) + m - 1
        if generation.prompt_token_ids[index] != token:
            raise ServerMisbehaved(
                f"prompt logprobs at {index} are for {generation.prompt_token_ids[index]}, not {token}"
            )
        top = tuple(zip(listed.top_ids[index], listed.top_logprobs[index]))
        positions.append(PromptPosition(token, listed.logprobs[index], top))
    return positions


def top_k_survivors(scaled: dict[int, float], listed: int, top_k: int) -> dict[int, float]:
    """vLLM masks logits below the k-th largest; only provable when k <= the listed count."""
    if top_k > listed:
        raise NotDerivable(f"top_k {top_k} exceeds the {listed} listed logprobs")
    kth = sorted(scaled.values(), reverse=True)[top_k - 1]
    return {token: value for token, value in scaled.items() if value >= kth}


def unlisted_mass_bounds(position: PromptPosition, temperature: float, vocab_size: int) -> tuple[float, float]:
    """Bounds on the sum of exp(logprob / T) over the N tokens not listed.

    Their raw probabilities sum to R = 1 - listed mass (known up to the float32 rounding of the listed
    logprobs), each at most x = the lowest listed one. T = 1: the sum is R itself. T < 1: x^(1/T) is
    convex, so the sum is smallest spread evenly (N (R/N)^(1/T)) and largest packed at x (R x^(1/T-1));
    T > 1: the other way round (and never above N x^(1/T))."""
    listed = dict(position.top)
    listed.setdefault(position.token, position.logprob)
    remaining = max(0.0, 1.0 - sum(math.exp(value) for value in listed.values()))
    low_mass, high_mass = max(0.0, remaining - TAIL_MASS_SLACK), remaining + TAIL_MASS_SLACK
    lowest = math.exp(min(value for _, value in position.top))
    count = max(1, vocab_size - len(listed))
    exponent = 1.0 / temperature
    if temperature == 1.0:
        return low_mass, high_mass
    spread_evenly = (count * (low_mass / count) ** exponent, count * (high_mass / count) ** exponent)
    packed = (low_mass * lowest ** (exponent - 1.0), high_mass * lowest ** (exponent - 1.0))
    if temperature < 1.0:
        return spread_evenly[0], packed[1]
    return packed[0], min(spread_evenly[1], count * lowest**exponent)


def top_p_survivors(
    masses: dict[int, float], normalizers: tuple[float, float], top_p: float, tail_open: bool
) -> dict[int, float]:
    """vLLM keeps a token iff the probability ranked above it is < p (ascending cumsum <= 1 - p masked).

    Provable only when the decision is the same at both normalizer bounds, not within float tolerance of
    p, and the unlisted tail (ranked below every listed token) is certainly cut."""
    low, high = normalizers
    survivors = {}
    above = 0.0
    for token, mass in sorted(masses.items(), key=lambda entry: -entry[1]):
        kept = [above / normalizer < top_p for normalizer in (low, high)]
        if kept[0] != kept[1] or min(abs(above / normalizer - top_p) for normalizer in (low, high)) < TOP_P_TOLERANCE:
            raise NotDerivable("the top-p cut depends on the unlisted tail or lies within float tolerance")
        if kept[0]:
            survivors[token] = mass
        above += mass
    if tail_open and above / high < top_p + TOP_P_TOLERANCE:
        raise NotDerivable("top-p keeps tokens beyond the listed ones")
    return survivors


def processed_logprobs(position: PromptPosition, filters: Filters, vocab_size: int) -> dict[int, float]:
    """The processed logprob (inference-validation.md 2) of every listed token and the position's own; -inf: masked.

    Order as vLLM's sampler: temperature, then top-k, then top-p; then log_softmax."""
    known = dict(position.top)
    known.setdefault(position.token, position.logprob)
    if filters.leaves_raw_unchanged:
        return known
    scaled = {token: value / filters.temperature for token, value in known.items()}
    tail_open = not filters.top_k
    kept = scaled if tail_open else top_k_survivors(scaled, len(position.top), filters.top_k)
    shift = max(kept.values())  # exp relative to the best keeps every mass representable
    masses = {token: math.exp(value - shift) for token, value in kept.items()}
    tail = unlisted_mass_bounds(position, filters.temperature, vocab_size) if tail_open else (0.0, 0.0)
    listed_mass = sum(masses.values())
    normalizers = (listed_mass + tail[0] * math.exp(-shift), listed_mass + tail[1] * math.exp(-shift))
    if filters.top_p < 1.0:
        kept = {token: scaled[token] for token in top_p_survivors(masses, normalizers, filters.top_p, tail_open)}
        normalizers = (sum(masses[token] for token in kept),) * 2  # the tail is cut: exact
    if math.log(normalizers[1] / normalizers[0]) > NORMALIZER_TOLERANCE:
        raise NotDerivable(
            f"temperature {filters.temperature:.3g}: the unlisted tail may move the normalizer by more than {NORMALIZER_TOLERANCE}"
        )
    log_normalizer = shift + math.log(normalizers[0])
    return {token: (scaled[token] - log_normalizer if token in kept else -math.inf) for token in known}


def position_columns(position: PromptPosition, logprobs: dict[int, float]) -> LogprobColumns:
    """The model's top-k of these logprobs as the engine reports them (-inf entries padded with the lowest ids)."""
    best = sorted(logprobs.items(), key=lambda entry: -entry[1])[:TOP_K]
    columns = LogprobColumns([logprobs[position.token]], [], [token for token, _ in best], [value for _, value in best])
    return pad_masked_entries(columns, TOP_K)


def one_forward_lists(
    positions: Sequence[PromptPosition], mode: str, request: pb.GenerateRequest, vocab_size: int
) -> list[Position]:
    """The replay's chain lists (sampled token first, then the model's best others), from one forward."""
    filters = Filters.of(request)
    if mode == "processed":
        require_derivable_request(request)
    replay: list[tuple[int, Mapping[int, float]]] = []
    for position in positions:
        logprobs = (
            processed_logprobs(position, filters, vocab_size)
            if mode == "processed"
            else dict(position.top) | {position.token: position.logprob}
        )
        (entries,) = chain_top_lists([position.token], position_columns(position, logprobs), TOP_K)
        replay.append((position.token, dict(entries)))
    return replay


@dataclass(frozen=True)
class OneForward:
    lists: list[Position] | None  # None: not derivable in this mode
    why_not: str | None = None


async def one_forward_replay(
    aio: AsyncInferenceClient, item: Item, prompt_logprobs: int, vocab_size: int
) -> OneForward:
    record = item.record
    generation = await aio.generate(one_forward_request(record, prompt_logprobs), timeout=RPC_TIMEOUT_SECONDS)
    positions = output_positions(generation, record)
    try:
        return OneForward(one_forward_lists(positions, record.spec.mode, record.request, vocab_size))
    except NotDerivable as reason:
        return OneForward(None, str(reason))


async def one_forward_all(
    aio: AsyncInferenceClient, items: Sequence[Item], prompt_logprobs: int, vocab_size: int
) -> list[OneForward]:
    jobs = [lambda item=item: one_forward_replay(aio, item, prompt_logprobs, vocab_size) for item in items]
    return await bounded_gather(jobs, MAX_CONCURRENT_REPLAYS)


async def timed(job: Awaitable[T]) -> tuple[T, float]:
    started = time.perf_counter()
    result = await job
    return result, time.perf_counter() - started


# ---------------------------------------------------------------- figures


@dataclass
class ItemResult:
    index: int
    mode: str
    config: str
    tamper_factor: float | None
    decode: Verdict
    one_forward: Verdict | None  # None: not derivable
    why_not: str | None
    one_forward_to_decode: float | None  # direct distance, decode lists as the reference (honest items)

    @property
    def forward(self) -> Verdict:
        """The one-forward verdict of a derivable item."""
        assert self.one_forward is not None
        return self.one_forward

    @property
    def agrees(self) -> bool | None:
        return None if self.one_forward is None else self.one_forward.passed == self.decode.passed


def item_result(
    index: int, item: Item, decode: Verdict, one_forward: OneForward, decode_lists: list[Position] | None
) -> ItemResult:
    spec = item.record.spec
    if one_forward.lists is None:
        return ItemResult(
            index, spec.mode, spec.config.name, item.tamper_factor, decode, None, one_forward.why_not, None
        )
    judgement = judge_inference(item.executor_positions, one_forward.lists, TOP_K, THRESHOLD)
    verdict = Verdict(judgement.distance, judgement.similarity, judgement.passed)
    direct = sequence_distance(decode_lists, one_forward.lists, TOP_K) if decode_lists is not None else None
    return ItemResult(index, spec.mode, spec.config.name, item.tamper_factor, decode, verdict, None, direct)


def spread(values: Sequence[float]) -> dict[str, float | None]:
    return {"median": median(values) if values else None, "max": max(values) if values else None}


def two_stage(results: Sequence[ItemResult]) -> dict[str, Any]:
    """Screen with one-forward; decode-replay items with |similarity - threshold| <= margin (and the
    items one-forward cannot derive). The smallest margin that agrees everywhere here is the largest
    distance to the threshold among disagreeing items; the gap-based margin (largest |one-forward -
    decode| similarity) would agree on this data whatever the verdicts."""
    screened = [result for result in results if result.one_forward is not None]
    disagreeing = [result for result in screened if not result.agrees]
    margin = max((abs(result.forward.similarity - THRESHOLD) for result in disagreeing), default=0.0)
    gap = max((abs(result.forward.similarity - result.decode.similarity) for result in screened), default=0.0)

    def decode_replays(bound: float) -> int:
        near = sum(abs(result.forward.similarity - THRESHOLD) <= bound for result in screened)
        return near + len(results) - len(screened)

    return {
        "agrees_with_margin_0": not disagreeing,
        "smallest_agreeing_margin": margin,
        "decode_replays_at_that_margin": decode_replays(margin) if disagreeing else len(results) - len(screened),
        "largest_similarity_gap": gap,
        "decode_replays_at_gap_margin": decode_replays(gap),
        "items": len(results),
    }


def mode_summary(results: Sequence[ItemResult]) -> dict[str, Any]:
    screened = [result for result in results if result.one_forward is not None]
    honest = [result for result in screened if result.tamper_factor is None]
    direct = [result.one_forward_to_decode for result in honest if result.one_forward_to_decode is not None]
    return {
        "items": len(results),
        "tampered_items": sum(result.tamper_factor is not None for result in results),
        "derivable": len(screened),
        "not_derivable_by_reason": count_by(result.why_not for result in results if result.one_forward is None),
        "verdicts_agree": sum(bool(result.agrees) for result in screened),
        "decode_passed": sum(result.decode.passed for result in screened),
        "one_forward_passed": sum(result.forward.passed for result in screened),
        "disagreements": [asdict(result) for result in screened if not result.agrees],
        "one_forward_vs_original_honest": spread([result.forward.distance for result in honest]),
        "decode_vs_original_honest": spread([result.decode.distance for result in honest]),
        "one_forward_minus_decode_abs": spread(
            [abs(result.forward.distance - result.decode.distance) for result in screened]
        ),
        "one_forward_vs_decode_direct_honest": spread(direct),
        "per_config": {
            name: config_summary([r for r in results if r.config == name])
            for name in dict.fromkeys(r.config for r in results)
        },
        "two_stage": two_stage(results),
    }


def config_summary(results: Sequence[ItemResult]) -> dict[str, Any]:
    screened = [result for result in results if result.one_forward is not None]
    honest = [result for result in screened if result.tamper_factor is None]
    return {
        "items": len(results),
        "derivable": len(screened),
        "agree": sum(bool(result.agrees) for result in screened),
        "one_forward_vs_original_honest_max": max((result.forward.distance for result in honest), default=None),
        "decode_vs_original_honest_max": max((result.decode.distance for result in honest), default=None),
        "abs_difference_max": max(
            (abs(result.forward.distance - result.decode.distance) for result in screened), default=None
        ),
    }


def count_by(keys: Any) -> dict[str, int]:
    counts: dict[str, int] = {}
    for key in keys:
        counts[key] = counts.get(key, 0) + 1
    return counts


def figure(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.6f}"


def mode_lines(mode: str, summary: dict[str, Any]) -> list[str]:
    stage = summary["two_stage"]
    lines = [
        f"{mode} mode: {summary['items']} items ({summary['tampered_items']} tampered), one-forward derivable for {summary['derivable']}",
        (
            f"  verdicts agreeing with the decode replay: {summary['verdicts_agree']} / {summary['derivable']} "
            f"(passed: decode {summary['decode_passed']}, one-forward {summary['one_forward_passed']})"
        ),
        "  distance one-forward vs original (honest): median {median}, max {max}".format(
            **map_figures(summary["one_forward_vs_original_honest"])
        ),
        "  distance decode vs original (honest):      median {median}, max {max}".format(
            **map_figures(summary["decode_vs_original_honest"])
        ),
        "  |one-forward - decode| distance:            median {median}, max {max}".format(
            **map_figures(summary["one_forward_minus_decode_abs"])
        ),
        "  distance one-forward vs decode (direct):    median {median}, max {max}".format(
            **map_figures(summary["one_forward_vs_decode_direct_honest"])
        ),
        (
            f"  two-stage: agrees with margin 0: {stage['agrees_with_margin_0']}; smallest agreeing margin {stage['smallest_agreeing_margin']:.6f} "
            f"({stage['decode_replays_at_that_margin']} of {stage['items']} items decode-replayed); largest similarity gap "
            f"{stage['largest_similarity_gap']:.6f} ({stage['decode_replays_at_gap_margin']} decode-replayed at that margin)"
        ),
    ]
    for reason, count in summary["not_derivable_by_reason"].items():
        lines.append(f"  not derivable ({count}): {reason}")
    for name, config in summary["per_config"].items():
        lines.append(
            f"    {name:16s} items {config['items']:3d} derivable {config['derivable']:3d} agree {config['agree']:3d}  "
            f"max dist 1F {figure(config['one_forward_vs_original_honest_max'])} decode {figure(config['decode_vs_original_honest_max'])} "
            f"max |1F-decode| {figure(config['abs_difference_max'])}"
        )
    for result in summary["disagreements"]:
        lines.append(
            f"    disagreement: item {result['index']} {result['config']} factor {result['tamper_factor']}: decode similarity "
            f"{result['decode']['similarity']:.6f} passed {result['decode']['passed']}, one-forward {result['one_forward']['similarity']:.6f} passed {result['one_forward']['passed']}"
        )
    return lines


def map_figures(values: dict[str, float | None]) -> dict[str, str]:
    return {name: figure(value) for name, value in values.items()}


# ---------------------------------------------------------------- the run


@dataclass
class Timings:
    record_seconds: float = 0.0
    decode_seconds: list[float] = field(default_factory=list)
    one_forward_seconds: list[float] = field(default_factory=list)

    @property
    def speedup(self) -> float:
        return median(self.decode_seconds) / median(self.one_forward_seconds)


async def warm_up(aio: AsyncInferenceClient, items: Sequence[Item], prompt_logprobs: int, vocab_size: int) -> None:
    """First-use code paths and batch shapes of both replays, untimed."""
    sample = list(items[:WARMUP_ITEMS])
    await decode_replay_verdicts(aio, sample)
    await one_forward_all(aio, sample, prompt_logprobs, vocab_size)


async def measure_replays(
    aio: AsyncInferenceClient,
    items: Sequence[Item],
    prompt_logprobs: int,
    vocab_size: int,
    repeats: int,
    timings: Timings,
) -> tuple[dict[int, Verdict], list[OneForward]]:
    """Each cycle runs both replays over all items, in an order alternating between cycles (the machine drifts)."""
    decode: dict[int, Verdict] = {}
    one_forward: list[OneForward] = []
    for cycle in range(repeats):
        order = ("decode", "one-forward") if cycle % 2 == 0 else ("one-forward", "decode")
        for name in order:
            if name == "decode":
                decode, seconds = await timed(decode_replay_verdicts(aio, items))
                timings.decode_seconds.append(seconds)
            else:
                one_forward, seconds = await timed(one_forward_all(aio, items, prompt_logprobs, vocab_size))
                timings.one_forward_seconds.append(seconds)
            print(f"  cycle {cycle + 1}: {name} replay of {len(items)} items in {seconds:.2f} s", flush=True)
    return decode, one_forward


async def decode_lists_of_honest(aio: AsyncInferenceClient, items: Sequence[Item]) -> list[list[Position] | None]:
    jobs = [lambda item=item: decode_replay_lists(aio, item.record) for item in items if item.tamper_factor is None]
    lists = iter(await bounded_gather(jobs, MAX_CONCURRENT_REPLAYS))
    return [next(lists) if item.tamper_factor is None else None for item in items]


async def study(target: str, args: argparse.Namespace) -> dict[str, Any]:
    async with AsyncInferenceClient(target) as aio:
        info = await aio.model_info()
        prompt_logprobs = info.max_logprobs  # the contract's bound: 20, never the full vocabulary
        timings = Timings()
        specs = item_specs(args.items_per_config, args.seed)
        print(f"recording {len(specs)} executor outputs of {args.tokens} tokens ...", flush=True)
        records, timings.record_seconds = await timed(record_all(aio, specs, args.tokens))
        items = make_items(records, args.tampered, args.seed)
        await warm_up(aio, items, prompt_logprobs, info.vocab_size)
        print(f"replaying {len(items)} items ({args.repeats} cycle(s)) ...", flush=True)
        decode, one_forward = await measure_replays(aio, items, prompt_logprobs, info.vocab_size, args.repeats, timings)
        direct = await decode_lists_of_honest(aio, items) if args.direct else [None] * len(items)
    results = [
        item_result(index, item, decode[index], one_forward[index], direct[index]) for index, item in enumerate(items)
    ]
    return {
        "model": str(args.model),
        "vocab_size": info.vocab_size,
        "prompt_logprobs_limit": prompt_logprobs,
        "threshold": THRESHOLD,
        "tokens": args.tokens,
        "top_k": TOP_K,
        "timings": asdict(timings) | {"speedup": timings.speedup},
        "modes": {mode: mode_summary([result for result in results if result.mode == mode]) for mode in MODES},
        "items": [asdict(result) for result in results],
    }


def report(figures: dict[str, Any]) -> str:
    timings = figures["timings"]
    lines = [
        f"one-forward replay study: {figures['model']}, {figures['tokens']} tokens per item, top-{figures['top_k']}, threshold {figures['threshold']}",
        f"prompt logprobs limit: {figures['prompt_logprobs_limit']} per position (no full vocabulary; vocab {figures['vocab_size']})",
    ]
    for mode, summary in figures["modes"].items():
        lines += mode_lines(mode, summary)
    decode = ", ".join(f"{seconds:.2f}" for seconds in timings["decode_seconds"])
    one_forward = ", ".join(f"{seconds:.2f}" for seconds in timings["one_forward_seconds"])
    lines += [
        f"wall time, all items of both modes: decode replay (ValidateInference) {decode} s; one-forward {one_forward} s",
        f"speed-up (median decode / median one-forward): {timings['speedup']:.2f}x",
    ]
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--model", type=Path, default=REPO_ROOT / PEAKED_MODEL_DIR, help="the peaked embedded model (default)"
    )
    parser.add_argument(
        "--items-per-config",
        type=int,
        default=20,
        help="honest items per mode and sampling setting (default 20: 200 in all)",
    )
    parser.add_argument("--tampered", type=int, default=100, help="scaled copies of honest records (default 100)")
    parser.add_argument("--tokens", type=int, default=24, help="generated tokens per item (default 24)")
    parser.add_argument("--repeats", type=int, default=2, help="timed cycles of both replays (default 2)")
    parser.add_argument(
        "--no-direct", dest="direct", action="store_false", help="skip the decode replays' own lists (direct distance)"
    )
    parser.add_argument("--seed", type=int, default=20251201)
    parser.add_argument("--json", type=Path, help="also write the figures (and every item) here")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if not (args.model / "config.json").is_file():
        raise SystemExit(f"no model at {args.model}: `make test` builds the peaked model")
    log_path = Path(tempfile.mkdtemp(prefix="one-forward-study-")) / "server.log"
    started = time.perf_counter()
    server = start_server(log_path, ["--model", str(args.model), *SHARED_SERVER_FLAGS])
    try:
        figures = asyncio.run(study(server.target, args))
    finally:
        server.stop()
    figures["total_seconds"] = time.perf_counter() - started
    figures["server_log"] = str(log_path)
    print(report(figures))
    print(f"total run time {figures['total_seconds']:.0f} s; server log {log_path}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
