"""Benchmark: ValidateInference on honest records whose logprobs mode nobody states (issue 26's goal).

On the peaked embedded model (`.build/models/qwen3-tiny-peaked`, output head x32: sampling filters really cut its
top-5 lists, so the two modes differ where they should), it records honest executor outputs with Generate, per
cell: both modes x six sampling settings (temperature 0.5, 0.7, 1.0; top-p 0.9 and top-k 20 at temperature 1;
greedy) x two lengths (24 and 200 tokens), --records per cell, each with its own seed and a varied prompt (texts
and token ids), top-5 chain lists. Each record is then judged by ValidateInference at threshold 0.951 with no mode
stated anywhere (neither the item's mode nor the request's logprobs.mode): the server resolves it
(docs/validation.md). Printed per cell:
- pass: records that passed (the goal: all of them);
- right: records whose verdict names the mode they were made in, or whose two modes the record cannot tell apart
  (InferenceVerdict.modes_indistinguishable: the replay's raw and processed lists are no farther apart than the
  record is from the nearer one; then the verdict is the same in either mode and either name is right). The goal:
  >= 99 % of each cell;
- exact: records whose verdict names exactly the mode they were made in;
- alike: records whose modes were indistinguishable (named by the padding count or the default);
- how the mode was resolved (replay / stricter / padding / default) and the lowest similarity.

Then the tampered records of the one-forward study (benchmarks/studies/one_forward_replay.py, its default records
and its 100 scaled copies, threshold 0.94) are judged twice, with the mode stated as the study states it and with
no mode stated: a tampered record that failed with its mode stated must still fail without it.

It starts one server (the peaked model, the test suite's SHARED_SERVER_FLAGS, at most --max-num-seqs rows per engine
step: on a CPU each row's sampler works over the whole 152k vocabulary, in both modes for a replay of unstated mode)
and asserts nothing; it exits 1 when a goal is missed. With --cache, the records and verdicts are kept in that file as they come and
read back by the next run (a run whose engine died resumes where it stopped). Usage, from the repository root:

    .venv/bin/python benchmarks/studies/unstated_mode.py [--records 50] [--cache /tmp/unstated_mode.items] [--json /tmp/unstated_mode.json]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import random
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

# Run as a script, only benchmarks/ is on the path; tests/support, engine_ext and the study live beside it.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import benchmarks.studies.one_forward_replay as study
from gonka.mlnode.client import AsyncInferenceClient, build_request, inference_item
from gonka.mlnode.v1 import inference_pb2 as pb
from gonka.mlnode.v1 import validation_pb2 as vpb
from server.embedded_model import PEAKED_MODEL_DIR
from tests.support.server_process import REPO_ROOT, SHARED_SERVER_FLAGS, start_server

MODES = ("raw", "processed")
SETTINGS: dict[str, dict[str, Any]] = {
    "temperature 0.5": dict(temperature=0.5),
    "temperature 0.7": dict(temperature=0.7),
    "temperature 1.0": dict(temperature=1.0),
    "top_p 0.9": dict(temperature=1.0, top_p=0.9),
    "top_k 20": dict(temperature=1.0, top_k=20),
    "greedy": dict(temperature=0.0),
}
LENGTHS = (24, 200)
THRESHOLD = 0.951
TOP_K = 5
GOAL_RIGHT_SHARE = 0.99
MAX_ITEMS_PER_CALL = 1024  # ValidateInferenceRequest's limit
RPC_TIMEOUT_SECONDS = 3600.0
MODE_NAMES = {pb.LOGPROBS_MODE_RAW: "raw", pb.LOGPROBS_MODE_PROCESSED: "processed"}
SOURCE_NAMES = {
    vpb.LOGPROBS_MODE_SOURCE_REPLAY: "replay",
    vpb.LOGPROBS_MODE_SOURCE_STRICTER: "stricter",
    vpb.LOGPROBS_MODE_SOURCE_PADDING: "padding",
    vpb.LOGPROBS_MODE_SOURCE_DEFAULT: "default",
    vpb.LOGPROBS_MODE_SOURCE_ITEM: "item",
    vpb.LOGPROBS_MODE_SOURCE_REQUEST: "request",
}


@dataclass(frozen=True)
class Cell:
    mode: str
    setting: str
    tokens: int

    @property
    def name(self) -> str:
        return f"{self.mode:>9} {self.setting:<15} {self.tokens:>3} tokens"


@dataclass(frozen=True)
class Spec:
    cell: Cell
    seed: int
    prompt: dict[str, Any]  # build_request's prompt= or token_ids=

    def fields(self) -> dict[str, Any]:
        return dict(
            **self.prompt,
            max_tokens=self.cell.tokens,
            ignore_eos=True,
            seed=self.seed,
            top_logprobs=TOP_K,
            **SETTINGS[self.cell.setting],
        )


@dataclass(frozen=True)
class Outcome:
    cell: Cell
    passed: bool
    similarity: float
    named: str
    source: str
    indistinguishable: bool

    @property
    def exact(self) -> bool:
        return self.named == self.cell.mode

    @property
    def right(self) -> bool:
        return self.exact or self.indistinguishable


def specs(records_per_cell: int, seed: int) -> list[Spec]:
    rng = random.Random(seed)
    made = []
    for mode in MODES:
        for setting in SETTINGS:
            for tokens in LENGTHS:
                for index in range(records_per_cell):
                    if index % 3 == 0:
                        prompt: dict[str, Any] = {"prompt": rng.choice(study.TEXT_PROMPTS)}
                    else:
                        length = rng.randint(*study.TOKEN_PROMPT_LENGTHS)
                        prompt = {"token_ids": [rng.randrange(*study.TOKEN_ID_RANGE) for _ in range(length)]}
                    made.append(Spec(Cell(mode, setting, tokens), rng.randrange(1, 2**31), prompt))
    return made


async def honest_item(aio: AsyncInferenceClient, spec: Spec) -> vpb.InferenceItem:
    """The record of one honest generation, as an item that states no mode anywhere."""
    fields = spec.fields()
    generation = await aio.generate(
        build_request(**fields, logprobs_mode=spec.cell.mode, chain_top_logprobs=True), timeout=RPC_TIMEOUT_SECONDS
    )
    output = generation.first
    if len(output.token_ids) != spec.cell.tokens or output.logprobs_mode != spec.cell.mode:
        raise study.ServerMisbehaved(f"{spec.cell.name}: {len(output.token_ids)} tokens in mode {output.logprobs_mode}")
    return inference_item(build_request(**fields), output.token_ids, output.logprobs.chain_top, threshold=THRESHOLD)


async def verdicts(aio: AsyncInferenceClient, items: Sequence[vpb.InferenceItem]) -> list[vpb.InferenceVerdict]:
    found: dict[int, vpb.InferenceVerdict] = {}
    for start in range(0, len(items), MAX_ITEMS_PER_CALL):
        async for response in aio.validate_inference(
            list(items[start : start + MAX_ITEMS_PER_CALL]), timeout=RPC_TIMEOUT_SECONDS
        ):
            if response.WhichOneof("outcome") != "verdict":
                raise study.ServerMisbehaved(f"item {start + response.index}: {response}")
            found[start + response.index] = response.verdict
    if sorted(found) != list(range(len(items))):
        raise study.ServerMisbehaved("ValidateInference did not answer every item once")
    return [found[index] for index in range(len(items))]


def unstated(item: vpb.InferenceItem) -> vpb.InferenceItem:
    """`item` with neither its own mode nor its request's."""
    copy = vpb.InferenceItem()
    copy.CopyFrom(item)
    copy.mode = pb.LOGPROBS_MODE_UNSPECIFIED
    copy.request.logprobs.mode = pb.LOGPROBS_MODE_UNSPECIFIED
    return copy


@dataclass(frozen=True)
class Tampered:
    mode: str
    setting: str
    factor: float
    item: vpb.InferenceItem


async def study_tampered(aio: AsyncInferenceClient, seed: int) -> list[Tampered]:
    """The one-forward study's default records (20 per mode and setting, 24 tokens) and its 100 scaled copies."""
    records = await study.record_all(aio, study.item_specs(20, seed), 24)
    return [
        Tampered(item.record.spec.mode, item.record.spec.config.name, item.tamper_factor, item.proto)
        for item in study.make_items(records, 100, seed)
        if item.tamper_factor is not None
    ]


async def tampered_comparison(aio: AsyncInferenceClient, tampered: list[Tampered]) -> dict[str, Any]:
    """The tampered records judged with the mode stated (as the study states it) and without."""
    stated = await verdicts(aio, [record.item for record in tampered])
    without = await verdicts(aio, [unstated(record.item) for record in tampered])
    rows = [
        {
            "mode": record.mode,
            "setting": record.setting,
            "factor": record.factor,
            "stated_passed": a.passed,
            "stated_similarity": a.similarity,
            "unstated_passed": b.passed,
            "unstated_similarity": b.similarity,
            "unstated_mode": MODE_NAMES.get(b.mode),
            "unstated_source": SOURCE_NAMES.get(b.mode_source),
        }
        for record, a, b in zip(tampered, stated, without)
    ]
    return {
        "records": len(rows),
        "failed_stated": sum(not row["stated_passed"] for row in rows),
        "failed_unstated": sum(not row["unstated_passed"] for row in rows),
        "failed_stated_passed_unstated": [row for row in rows if not row["stated_passed"] and row["unstated_passed"]],
        "passed_stated_failed_unstated": sum(row["stated_passed"] and not row["unstated_passed"] for row in rows),
        "rows": rows,
    }


class Progress:
    """What a run has made so far, one JSON line per record, tampered copy or verdict, appended as each comes, so
    that a run whose engine died (this CPU is shared; its OOM killer takes the largest process) resumes from there.
    Without a path, kept in memory only."""

    def __init__(self, path: Path | None) -> None:
        self._path = path
        self.items: dict[int, vpb.InferenceItem] = {}
        self.verdicts: dict[int, vpb.InferenceVerdict] = {}
        self.tampered: list[Tampered] = []
        if path is not None and path.is_file():
            for line in path.read_text().splitlines():
                self._read(json.loads(line))

    def add_item(self, index: int, item: vpb.InferenceItem) -> None:
        self.items[index] = item
        self._write({"item": index, "proto": _encoded(item)})

    def add_verdict(self, index: int, verdict: vpb.InferenceVerdict) -> None:
        self.verdicts[index] = verdict
        self._write({"verdict": index, "proto": _encoded(verdict)})

    def add_tampered(self, records: Sequence[Tampered]) -> None:
        self.tampered = list(records)
        for record in records:
            self._write({"tampered": [record.mode, record.setting, record.factor], "proto": _encoded(record.item)})

    def _read(self, entry: dict[str, Any]) -> None:
        proto = base64.b64decode(entry["proto"])
        if "item" in entry:
            self.items[entry["item"]] = vpb.InferenceItem.FromString(proto)
        elif "verdict" in entry:
            self.verdicts[entry["verdict"]] = vpb.InferenceVerdict.FromString(proto)
        else:
            mode, setting, factor = entry["tampered"]
            self.tampered.append(Tampered(mode, setting, factor, vpb.InferenceItem.FromString(proto)))

    def _write(self, entry: dict[str, Any]) -> None:
        if self._path is not None:
            with self._path.open("a") as out:
                out.write(json.dumps(entry) + "\n")


def _encoded(message: Any) -> str:
    return base64.b64encode(message.SerializeToString()).decode()


async def record_missing(aio: AsyncInferenceClient, made: Sequence[Spec], progress: Progress, concurrency: int) -> None:
    """Records the specs not recorded yet, one mode after the other: a batch of one mode samples its logprobs once,
    a batch mixing both takes them twice."""
    slots = asyncio.Semaphore(concurrency)

    async def recorded(index: int) -> None:
        async with slots:
            progress.add_item(index, await honest_item(aio, made[index]))

    for mode in MODES:
        await asyncio.gather(
            *(
                recorded(index)
                for index, spec in enumerate(made)
                if spec.cell.mode == mode and index not in progress.items
            )
        )


async def validate_missing(aio: AsyncInferenceClient, count: int, progress: Progress) -> None:
    missing = [index for index in range(count) if index not in progress.verdicts]
    for start in range(0, len(missing), MAX_ITEMS_PER_CALL):
        chunk = missing[start : start + MAX_ITEMS_PER_CALL]
        async for response in aio.validate_inference(
            [progress.items[index] for index in chunk], timeout=RPC_TIMEOUT_SECONDS
        ):
            if response.WhichOneof("outcome") != "verdict":
                raise study.ServerMisbehaved(f"item {chunk[response.index]}: {response}")
            progress.add_verdict(chunk[response.index], response.verdict)


async def run(target: str, args: argparse.Namespace) -> dict[str, Any]:
    made = specs(args.records, args.seed)
    progress = Progress(args.cache)
    async with AsyncInferenceClient(target) as aio:
        started = time.perf_counter()
        print(
            f"recording {len(made)} honest records ({args.records} per cell, {len(made) // args.records} cells; "
            f"{len(progress.items)} already made) ...",
            flush=True,
        )
        await record_missing(aio, made, progress, args.max_num_seqs)
        if not progress.tampered:
            print("recording the one-forward study's records and their tampered copies ...", flush=True)
            progress.add_tampered(await study_tampered(aio, study.parse_args([]).seed))
        record_seconds = time.perf_counter() - started
        print(
            f"validating the honest records with no mode stated (threshold {THRESHOLD}; {len(progress.verdicts)} already judged) ...",
            flush=True,
        )
        started = time.perf_counter()
        await validate_missing(aio, len(made), progress)
        validate_seconds = time.perf_counter() - started
        print("judging the study's tampered records with and without their mode ...", flush=True)
        tampered = await tampered_comparison(aio, progress.tampered)
    judged = [progress.verdicts[index] for index in range(len(made))]
    outcomes = [
        Outcome(
            spec.cell,
            verdict.passed,
            verdict.similarity,
            MODE_NAMES.get(verdict.mode, "?"),
            SOURCE_NAMES.get(verdict.mode_source, "?"),
            verdict.modes_indistinguishable,
        )
        for spec, verdict in zip(made, judged)
    ]
    return {
        "model": str(args.model),
        "records_per_cell": args.records,
        "threshold": THRESHOLD,
        "record_seconds": record_seconds,
        "validate_seconds": validate_seconds,
        "cells": [
            cell_summary(cell, [o for o in outcomes if o.cell == cell])
            for cell in dict.fromkeys(o.cell for o in outcomes)
        ],
        "tampered": tampered,
        "outcomes": [asdict(o) for o in outcomes],
    }


def cell_summary(cell: Cell, outcomes: list[Outcome]) -> dict[str, Any]:
    count = len(outcomes)
    return {
        "cell": cell.name.strip(),
        "records": count,
        "passed": sum(o.passed for o in outcomes) / count,
        "right": sum(o.right for o in outcomes) / count,
        "exact": sum(o.exact for o in outcomes) / count,
        "indistinguishable": sum(o.indistinguishable for o in outcomes) / count,
        "sources": dict(Counter(o.source for o in outcomes)),
        "min_similarity": min(o.similarity for o in outcomes),
    }


def report(figures: dict[str, Any]) -> tuple[str, bool]:
    lines = [
        f"unstated-mode validation: {figures['model']}, {figures['records_per_cell']} records per cell, top-{TOP_K}, threshold {figures['threshold']}",
        f"{'cell':<39} {'pass':>6} {'right':>6} {'exact':>6} {'alike':>6}  {'min sim':>8}  sources",
    ]
    honest_met = True
    for cell in figures["cells"]:
        sources = ", ".join(f"{name} {count}" for name, count in sorted(cell["sources"].items()))
        lines.append(
            f"{cell['cell']:<39} {cell['passed']:>6.1%} {cell['right']:>6.1%} {cell['exact']:>6.1%} {cell['indistinguishable']:>6.1%}  "
            f"{cell['min_similarity']:>8.5f}  {sources}"
        )
        honest_met &= cell["passed"] == 1.0 and cell["right"] >= GOAL_RIGHT_SHARE
    tampered = figures["tampered"]
    flipped = tampered["failed_stated_passed_unstated"]
    lines += [
        f"goal (every record passes, right >= {GOAL_RIGHT_SHARE:.0%} in every cell): {'met' if honest_met else 'MISSED'}",
        (
            f"one-forward study's tampered records (threshold {study.THRESHOLD}): {tampered['records']}; failed with the mode stated "
            f"{tampered['failed_stated']}, without it {tampered['failed_unstated']}; failed stated but passed unstated: {len(flipped)}; "
            f"passed stated but failed unstated: {tampered['passed_stated_failed_unstated']}"
        ),
        f"goal (every tampered record that failed with its mode stated fails without it): {'met' if not flipped else 'MISSED'}",
        f"wall time: recording (or reading) {figures['record_seconds']:.0f} s, validating the honest records {figures['validate_seconds']:.0f} s",
    ]
    return "\n".join(lines), honest_met and not flipped


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--model", type=Path, default=REPO_ROOT / PEAKED_MODEL_DIR, help="the peaked embedded model (default)"
    )
    parser.add_argument("--records", type=int, default=50, help="honest records per cell (default 50: 1200 in all)")
    parser.add_argument("--seed", type=int, default=20261203)
    parser.add_argument(
        "--max-num-seqs", type=int, default=64, help="rows per engine step, and records made at once (default 64)"
    )
    parser.add_argument(
        "--cache", type=Path, help="keep the records and verdicts here as they come; a rerun resumes from them"
    )
    parser.add_argument("--json", type=Path, help="also write the figures (and every record's outcome) here")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if not (args.model / "config.json").is_file():
        raise SystemExit(f"no model at {args.model}: `make test` builds the peaked model")
    log_path = Path(tempfile.mkdtemp(prefix="unstated-mode-")) / "server.log"
    started = time.perf_counter()
    server = start_server(
        log_path, ["--model", str(args.model), *SHARED_SERVER_FLAGS, "--max-num-seqs", str(args.max_num_seqs)]
    )
    try:
        figures = asyncio.run(run(server.target, args))
    finally:
        server.stop()
    figures["total_seconds"] = time.perf_counter() - started
    text, met = report(figures)
    print(text)
    print(f"total run time {figures['total_seconds']:.0f} s; server log {log_path}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1, default=str))
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
