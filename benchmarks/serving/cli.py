"""The command line: flags, the run as a whole, the printed report and the optional JSON document."""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from benchmarks.serving.engine_flags import engine_flags, reserved_flags_in
from benchmarks.serving.errors import BenchmarkError
from benchmarks.serving.goals import all_goal_checks
from benchmarks.serving.kinds import KINDS, NOT_INSTALLED, installed_kinds
from benchmarks.serving.machine import machine_description
from benchmarks.serving.progress import progress
from benchmarks.serving.report import report
from benchmarks.serving.schedule import Outcome, run
from benchmarks.serving.settings import DEFAULT_MODEL, ENGINE_ENV, Settings
from benchmarks.serving.summary import summarize
from benchmarks.serving.workload import CHAT_MESSAGES, Workload, render_prompt, require_one_step_prefill

DESCRIPTION = (
    "Serving benchmark: this server against vLLM's OpenAI-compatible and gRPC servers and its offline LLM.generate."
)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    installed = installed_kinds()
    parser = argparse.ArgumentParser(description=DESCRIPTION)
    parser.add_argument("--concurrency", default="1,16,64", help="comma-separated stream counts (default: %(default)s)")
    parser.add_argument("--tokens", type=int, default=128, help="tokens generated per stream (default: %(default)s)")
    parser.add_argument(
        "--only",
        default=",".join(installed),
        help=f"configurations to run, of: {', '.join(KINDS)} (default: %(default)s)",
    )
    parser.add_argument(
        "--model", type=Path, default=DEFAULT_MODEL, help="model directory (default: the embedded model)"
    )
    parser.add_argument(
        "--server-flags",
        default="",
        help="extra vLLM engine flags for every configuration, one string (e.g. '--load-format dummy "
        "--gpu-memory-utilization 0.85'); its --max-num-seqs, --max-num-batched-tokens and --max-model-len replace the "
        "benchmark's (by default sized for the largest --concurrency)",
    )
    parser.add_argument(
        "--one-at-a-time",
        action="store_true",
        help="start, measure and stop each configuration before the next starts (needed where two engines cannot "
        "share the accelerator, e.g. with --gpu-memory-utilization over a half); default: side by side",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="measured cycles per concurrency; figures are their medians (default: %(default)s)",
    )
    parser.add_argument(
        "--ttft-rounds",
        type=int,
        default=4,
        help="one-token rounds after each measured round, adding TTFT samples (default: %(default)s)",
    )
    parser.add_argument("--json", type=Path, help="also write the full results as JSON here")
    parser.add_argument(
        "--coalesce-ms",
        type=int,
        default=1000,
        help="also run ours with StreamOptions.coalesce_ms of this many ms (0: skip; default: %(default)s)",
    )
    args = parser.parse_args(argv)
    kinds = tuple(kind.strip() for kind in args.only.split(",") if kind.strip())
    unknown = set(kinds) - set(KINDS)
    if unknown or not kinds:
        parser.error(f"--only: unknown configuration(s) {sorted(unknown)}; choose from {', '.join(KINDS)}")
    missing = [kind for kind in kinds if kind not in installed]
    if missing:
        parser.error("; ".join(f"--only: {kind}: {NOT_INSTALLED[kind]}" for kind in missing))
    args.kinds = kinds
    try:
        args.concurrencies = tuple(int(value) for value in args.concurrency.split(","))
    except ValueError:
        parser.error("--concurrency: comma-separated positive integers, e.g. 1,16,64")
    if any(value < 1 for value in args.concurrencies) or args.tokens < 1 or args.repeats < 1 or args.ttft_rounds < 0:
        parser.error("--concurrency, --tokens and --repeats must be positive, --ttft-rounds not negative")
    if not (args.model / "config.json").is_file():
        parser.error(f"--model: no model at {args.model} (build the embedded one with `make model`)")
    try:
        args.server_flag_list = tuple(shlex.split(args.server_flags))
    except ValueError as error:
        parser.error(f"--server-flags: {error}")
    reserved = reserved_flags_in(args.server_flag_list)
    if reserved:
        parser.error(f"--server-flags: the benchmark sets {', '.join(reserved)} itself (the model: with --model)")
    return args


def json_document(
    settings: Settings, workload: Workload, outcome: Outcome, machine: dict[str, Any], wall: float
) -> dict[str, Any]:
    results = outcome.results
    return {
        "command": shlex.join(sys.orig_argv),
        "machine": machine,
        "engine_flags": list(settings.engine_flags),
        "engine_env": dict(ENGINE_ENV),
        "layout": "one at a time" if settings.one_at_a_time else "side by side",
        "model": str(settings.model),
        "prompt_token_ids": list(workload.prompt_ids),
        "tokens_per_stream": workload.tokens,
        "servers": outcome.servers,
        "failures": outcome.failures,
        "repeats": settings.repeats,
        "results": [asdict(result) for result in results],
        "summaries": [asdict(summary) for summary in summarize(results)],
        "goal_checks": [asdict(check) | {"description": check.description} for check in all_goal_checks(results)],
        "wall_seconds": wall,
        "log_dir": str(settings.log_dir),
    }


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    log_dir = Path(tempfile.mkdtemp(prefix="serving-bench-"))
    model = args.model.resolve()
    workload = Workload(CHAT_MESSAGES, tuple(render_prompt(model, CHAT_MESSAGES)), args.tokens, args.coalesce_ms)
    try:
        flags = engine_flags(args.server_flag_list, max(args.concurrencies), len(workload.prompt_ids))
    except ValueError as error:
        progress(f"FAILED: {error}")
        return 2
    settings = Settings(
        model=model,
        tokens=args.tokens,
        concurrencies=args.concurrencies,
        kinds=args.kinds,
        log_dir=log_dir,
        repeats=args.repeats,
        ttft_rounds=args.ttft_rounds,
        engine_flags=flags.flags,
        max_model_len=flags.max_model_len,
        one_at_a_time=args.one_at_a_time,
    )
    machine = machine_description()
    progress(f"prompt: {len(workload.prompt_ids)} tokens; engine flags: {shlex.join(flags.flags)}; logs in {log_dir}")
    try:
        require_one_step_prefill(workload, settings.concurrencies, flags.max_num_batched_tokens)
    except BenchmarkError as error:
        progress(f"FAILED: {error}")
        return 1

    def checkpoint(outcome: Outcome) -> None:
        if args.json:
            document = json_document(settings, workload, outcome, machine, time.monotonic() - started)
            args.json.write_text(json.dumps(document, indent=2) + "\n")
            progress(f"results so far written to {args.json}")

    outcome = asyncio.run(run(settings, workload, checkpoint))
    if outcome.results:
        print(report(settings, workload, outcome, machine, time.monotonic() - started), flush=True)
    return 1 if outcome.failures else 0
