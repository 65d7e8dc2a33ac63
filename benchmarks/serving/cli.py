"""The command line and the run as a whole: flags; per configuration kind, how it is started and which
configurations (load clients) run on it; the schedule; the printed report and the optional JSON document.

The schedule: per concurrency a warm-up round of each configuration, then --repeats cycles of measured rounds in an
order rotated from cycle to cycle; the configurations started side by side (default) or one at a time. Why cycles
side by side: this machine's speed drifts by 10-15% over minutes, so two configurations are compared within a
cycle, where their rounds are minutes apart at most (see report's goals). One at a time (where two engines cannot
share the accelerator): each configuration is started, measured at every concurrency and cycle, and stopped before
the next starts; a cycle then pairs rounds further apart, and a configuration that fails leaves the others to run
(one long run on a lent machine is not lost)."""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import sys
import tempfile
import time
import traceback
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeVar

from benchmarks.serving.charts import chart_beside
from benchmarks.serving.drivers import Scenario, openai_scenarios, ours_scenarios, vllm_grpc_scenarios
from benchmarks.serving.measurement import Configuration, Live, Outcome, streamed, summarize
from benchmarks.serving.offline import LiveOffline, offline_configuration, running_offline
from benchmarks.serving.report import all_goal_checks, format_progress, report
from benchmarks.serving.servers import LiveServer, running_server, short_tail
from benchmarks.serving.settings import (
    CHAT_MESSAGES,
    DEFAULT_MODEL,
    ENGINE_ENV,
    KINDS,
    NOT_INSTALLED,
    OFFLINE,
    BenchmarkError,
    Settings,
    Workload,
    engine_flags,
    installed_kinds,
    machine_description,
    progress,
    render_prompt,
    require_one_step_prefill,
    reserved_flags_in,
)

ScenarioBuilder = Callable[[AsyncExitStack, LiveServer, Workload], Awaitable[list[Scenario]]]
SCENARIO_BUILDERS: MappingProxyType[str, ScenarioBuilder] = MappingProxyType(
    {"ours": ours_scenarios, "openai": openai_scenarios, "vllm-grpc": vllm_grpc_scenarios}
)


@asynccontextmanager
async def started(kind: str, settings: Settings) -> AsyncIterator[Live]:
    """Loaded and ready. A server's startup blocks the event loop on purpose: nothing else runs then."""
    if kind == OFFLINE:
        async with running_offline(settings) as offline:
            yield offline
    else:
        with running_server(kind, settings) as server:
            yield server


async def configurations(
    clients: AsyncExitStack, live: Live, workload: Workload, settings: Settings
) -> list[Configuration]:
    """`clients` holds the load clients' connections, closed before their server stops."""
    if isinstance(live, LiveOffline):
        return [offline_configuration(live, workload)]
    assert isinstance(live, LiveServer)
    scenarios = await SCENARIO_BUILDERS[live.kind](clients, live, workload)
    return [streamed(scenario, workload, settings.ttft_rounds) for scenario in scenarios]


T = TypeVar("T")


def rotated(items: Sequence[T], shift: int) -> list[T]:
    """Each cycle starts one configuration later, so that none always runs first or last."""
    shift %= len(items)
    return [*items[shift:], *items[:shift]]


@contextmanager
def blamed_on(live: Live) -> Iterator[None]:
    """A misbehaving configuration's error carries the end of its log."""
    try:
        yield
    except BenchmarkError as error:
        raise BenchmarkError(f"{error}\n--- last lines of {live.log_path} ---\n{short_tail(live.log_path)}") from None


async def measure_all(
    chosen: Sequence[Configuration], lives: Sequence[Live], settings: Settings, outcome: Outcome
) -> None:
    """Every concurrency's warm-ups and cycles of `chosen`; `lives` are all processes running meanwhile."""
    for streams in settings.concurrencies:
        for configuration in chosen:
            with blamed_on(configuration.live):
                await configuration.warm_up(streams)
        for cycle in range(settings.repeats):
            for configuration in rotated(chosen, cycle):
                bystanders = [pid for live in lives if live is not configuration.live for pid in live.process_ids()]
                with blamed_on(configuration.live):
                    result = await configuration.measure(streams, cycle, bystanders)
                progress(format_progress(result))
                outcome.results.append(result)


async def side_by_side(settings: Settings, workload: Workload, outcome: Outcome) -> None:
    async with AsyncExitStack() as processes:
        # Loaded one at a time, then kept running side by side.
        lives = []
        for kind in settings.kinds:
            lives.append(await processes.enter_async_context(started(kind, settings)))
            outcome.servers[kind] = lives[-1].info()
        async with AsyncExitStack() as clients:
            chosen = [c for live in lives for c in await configurations(clients, live, workload, settings)]
            await measure_all(chosen, lives, settings, outcome)


async def alone(kind: str, settings: Settings, workload: Workload, outcome: Outcome) -> None:
    async with started(kind, settings) as live, AsyncExitStack() as clients:
        outcome.servers[kind] = live.info()
        await measure_all(await configurations(clients, live, workload, settings), [live], settings, outcome)


async def recorded(what: str, attempt: Awaitable[None], outcome: Outcome) -> None:
    """Any error, not only a misbehaving server's: the rounds measured before it are still reported."""
    try:
        await attempt
    except BenchmarkError as error:
        outcome.failures[what] = str(error)
    except Exception:
        outcome.failures[what] = traceback.format_exc()
    else:
        return
    progress(f"FAILED: {what}: {outcome.failures[what]}")


async def run(settings: Settings, workload: Workload, checkpoint: Callable[[Outcome], None]) -> Outcome:
    """`checkpoint` gets the outcome so far after each configuration run alone, and at the end: a run
    stopped from outside (a lent machine's time limit) keeps what it measured."""
    outcome = Outcome()
    if settings.one_at_a_time:
        for kind in settings.kinds:
            await recorded(kind, alone(kind, settings, workload, outcome), outcome)
            checkpoint(outcome)
    else:
        await recorded(", ".join(settings.kinds), side_by_side(settings, workload, outcome), outcome)
        checkpoint(outcome)
    return outcome


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
    parser.add_argument(
        "--json", type=Path, help="also write the full results as JSON here, and their chart beside it (.png)"
    )
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
    settings: Settings, workload: Workload, outcome: Outcome, machine: dict[str, Any], started_utc: str, wall: float
) -> dict[str, Any]:
    results = outcome.results
    return {
        "command": shlex.join(sys.orig_argv),
        "date_utc": started_utc,
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
    started_utc = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
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
            document = json_document(settings, workload, outcome, machine, started_utc, time.monotonic() - started)
            args.json.write_text(json.dumps(document, indent=2) + "\n")
            progress(f"results so far written to {args.json}")

    outcome = asyncio.run(run(settings, workload, checkpoint))
    if outcome.results:
        print(report(settings, workload, outcome, machine, time.monotonic() - started), flush=True)
        if args.json:
            progress(chart_beside("serving", args.json))
    return 1 if outcome.failures else 0
