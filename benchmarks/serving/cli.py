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

from benchmarks.serving.errors import BenchmarkError
from benchmarks.serving.goals import goal_checks, goal_streams
from benchmarks.serving.machine import machine_description
from benchmarks.serving.progress import progress
from benchmarks.serving.report import report
from benchmarks.serving.round_result import RoundResult
from benchmarks.serving.schedule import run
from benchmarks.serving.settings import DEFAULT_MODEL, ENGINE_ENV, ENGINE_FLAGS, SERVER_KINDS, Settings
from benchmarks.serving.summary import summarize
from benchmarks.serving.workload import CHAT_MESSAGES, Workload, render_prompt, require_one_step_prefill

DESCRIPTION = "Serving benchmark: this server against vLLM 0.15.1's OpenAI-compatible and gRPC servers."


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=DESCRIPTION)
    parser.add_argument("--concurrency", default="1,16,64", help="comma-separated stream counts (default: %(default)s)")
    parser.add_argument("--tokens", type=int, default=128, help="tokens generated per stream (default: %(default)s)")
    parser.add_argument("--only", default=",".join(SERVER_KINDS), help="servers to run, of: %(default)s")
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL, help="model directory (default: the embedded model)")
    parser.add_argument(
        "--repeats", type=int, default=3, help="measured cycles per concurrency; figures are their medians (default: %(default)s)"
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
    unknown = set(kinds) - set(SERVER_KINDS)
    if unknown or not kinds:
        parser.error(f"--only: unknown server(s) {sorted(unknown)}; choose from {', '.join(SERVER_KINDS)}")
    args.kinds = kinds
    try:
        args.concurrencies = tuple(int(value) for value in args.concurrency.split(","))
    except ValueError:
        parser.error("--concurrency: comma-separated positive integers, e.g. 1,16,64")
    if any(value < 1 for value in args.concurrencies) or args.tokens < 1 or args.repeats < 1 or args.ttft_rounds < 0:
        parser.error("--concurrency, --tokens and --repeats must be positive, --ttft-rounds not negative")
    if not (args.model / "config.json").is_file():
        parser.error(f"--model: no model at {args.model} (build the embedded one with `make model`)")
    return args


def json_document(
    settings: Settings,
    workload: Workload,
    results: Sequence[RoundResult],
    servers: dict[str, Any],
    machine: dict[str, Any],
    wall: float,
) -> dict[str, Any]:
    return {
        "command": shlex.join(sys.orig_argv),
        "machine": machine,
        "engine_flags": list(ENGINE_FLAGS),
        "engine_env": dict(ENGINE_ENV),
        "model": str(settings.model),
        "prompt_token_ids": list(workload.prompt_ids),
        "tokens_per_stream": workload.tokens,
        "servers": servers,
        "repeats": settings.repeats,
        "results": [asdict(result) for result in results],
        "summaries": [asdict(summary) for summary in summarize(results)],
        "goal_checks": [asdict(check) for check in goal_checks(results, goal_streams(settings))],
        "wall_seconds": wall,
        "log_dir": str(settings.log_dir),
    }


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    log_dir = Path(tempfile.mkdtemp(prefix="serving-bench-"))
    settings = Settings(args.model.resolve(), args.tokens, args.concurrencies, args.kinds, log_dir, args.repeats, args.ttft_rounds)
    workload = Workload(CHAT_MESSAGES, tuple(render_prompt(settings.model, CHAT_MESSAGES)), args.tokens, args.coalesce_ms)
    machine = machine_description()
    progress(f"prompt: {len(workload.prompt_ids)} tokens; server logs in {log_dir}")
    try:
        require_one_step_prefill(workload, settings.concurrencies)
        results, servers = asyncio.run(run(settings, workload))
    except BenchmarkError as error:
        progress(f"FAILED: {error}")
        return 1
    wall = time.monotonic() - started
    print(report(settings, workload, results, servers, machine, wall), flush=True)
    if args.json:
        args.json.write_text(json.dumps(json_document(settings, workload, results, servers, machine, wall), indent=2) + "\n")
        progress(f"results written to {args.json}")
    return 0
