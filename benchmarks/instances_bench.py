"""Engine instances benchmark (--instances): two servers side by side, measured in alternation. Prints figures; asserts
nothing about speed.

Each cycle runs, on each server in turn (the order rotated from cycle to cycle):
- inference: --streams concurrent streams (default 64) of --tokens tokens each (seeded temperature 1.0, ignore_eos,
  top-5 logprobs, token-id prompts), all started together: delivered tokens/s, and the CPU seconds the server's API
  process (the `python -m server` process: gRPC, routing, every engine's output handling) spent per token;
- mining: a PoC round of --shape (seq_len x batch) for --seconds: nonces/min (first forward issued to last returned,
  as the server measures it; with several instances, the union of their groups).
Printed per server: the median over the cycles; beside it the median of the per-cycle ratios (second over first).

Comparisons (--compare):
- scaling (default): `--instances 1` on one core against `--instances 2`, one core each (this CPU: what scales when
  a host's devices are split among instances). On a CPU the one instance is bound to the first core
  (VLLM_CPU_OMP_THREADS_BIND=0), as each of the two is to its own.
- baseline: today's single-engine server (the checkout in --baseline-src, a commit before instances) against this
  checkout at `--instances 1`: what the instance machinery costs one engine. Make the baseline checkout with
  `scripts/baseline-checkout.sh <commit> .build/baseline` (an ignored folder, so it can travel beside a checkout).

Usage, from the repository root:

    .venv/bin/python benchmarks/instances_bench.py --server-flags="--enforce-eager" --repeats 3
    scripts/baseline-checkout.sh ce81cd8 .build/baseline
    .venv/bin/python benchmarks/instances_bench.py --compare baseline --baseline-src .build/baseline
    # an H200 (docs/gpu.md's offline install), the Qwen3-8B shape with random weights, both servers resident:
    python3 benchmarks/instances_bench.py --compare baseline --baseline-src .build/baseline \
        --model .build/models/qwen3-8b-shape --shape 1024x32 --tokens 256 --seconds 30 --repeats 3 \
        --server-flags "--load-format dummy --max-model-len 4096 --gpu-memory-utilization 0.40"
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shlex
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import grpc

from benchmarks.serving.servers import CLOCK_TICKS_PER_SECOND, process_cpu_ticks
from gonka.mlnode.client import AsyncInferenceClient, build_request
from gonka.mlnode.v1 import inference_pb2 as pb
from gonka.mlnode.v1 import poc_pb2, poc_pb2_grpc
from server.embedded_model import DEFAULT_MODEL_DIR
from tests.support.server_process import REPO_ROOT, ServerProcess, engine_environment, start_server

PROMPT_IDS = [9707, 1879, 11, 419, 374, 264, 1273]
TOP_LOGPROBS = 5
CPU_BIND = "VLLM_CPU_OMP_THREADS_BIND"
STREAM_TIMEOUT_SECONDS = 900.0


@dataclass(frozen=True)
class Configuration:
    label: str
    flags: tuple[str, ...]
    source: Path = REPO_ROOT
    environment: dict[str, str] = field(default_factory=dict)


def configurations(args: argparse.Namespace) -> list[Configuration]:
    if args.compare == "scaling":
        return [
            Configuration("1 instance, 1 core", ("--instances", "1"), environment={CPU_BIND: "0"} if on_cpu() else {}),
            Configuration("2 instances", ("--instances", "2")),
        ]
    if args.baseline_src is None:
        raise SystemExit("--compare baseline needs --baseline-src (scripts/baseline-checkout.sh makes one)")
    return [
        Configuration("today's server", (), source=Path(args.baseline_src).resolve()),
        Configuration("--instances 1", ("--instances", "1")),
    ]


def on_cpu() -> bool:
    import torch

    return not torch.cuda.is_available()


def start(configuration: Configuration, args: argparse.Namespace, log_dir: Path) -> ServerProcess:
    env = engine_environment(kv_cache_gib=args.kv_cache_gib)
    env.update(configuration.environment)
    source = configuration.source
    # The configuration's own code first; its engine processes inherit the path (the plugin is found by its name).
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(source), str(source / "clients" / "python"), env.get("PYTHONPATH")])
    )
    flags = [*args.model_flags, *shlex.split(args.server_flags), *configuration.flags]
    log_path = log_dir / f"{configuration.label.replace(' ', '-').replace(',', '').replace(chr(39), '')}.log"
    print(f"starting {configuration.label}: {' '.join(flags)}", flush=True)
    return start_server(log_path, flags, env=env, cwd=source)


async def streams_round(target: str, pid: int, streams: int, tokens: int, seed: int) -> dict[str, float]:
    async with AsyncInferenceClient(target) as client:

        async def one(index: int) -> int:
            request = build_request(
                token_ids=PROMPT_IDS,
                max_tokens=tokens,
                temperature=1.0,
                seed=seed + index,
                ignore_eos=True,
                top_logprobs=TOP_LOGPROBS,
            )
            delivered = 0
            async for response in client.stream(request, timeout=STREAM_TIMEOUT_SECONDS):
                delivered += len(response.tokens.ids)
                if response.HasField("finish") and response.finish.reason != pb.FINISH_REASON_LENGTH:
                    raise RuntimeError(f"a stream ended {response.finish}")
            return delivered

        ticks_before = sum(process_cpu_ticks(pid))
        started = time.perf_counter()
        delivered = sum(await asyncio.gather(*(one(index) for index in range(streams))))
        elapsed = time.perf_counter() - started
        api_seconds = (sum(process_cpu_ticks(pid)) - ticks_before) / CLOCK_TICKS_PER_SECOND
    if delivered != streams * tokens:
        raise RuntimeError(f"{delivered} tokens delivered, {streams * tokens} asked for")
    return {"tokens_per_s": delivered / elapsed, "api_cpu_us_per_token": 1e6 * api_seconds / delivered}


async def mining_round(target: str, model: str, seq_len: int, batch: int, seconds: float) -> dict[str, float]:
    async with grpc.aio.insecure_channel(target) as channel:
        poc = poc_pb2_grpc.PocServiceStub(channel)
        request = poc_pb2.StartRoundRequest(
            block_hash=f"instances-bench-{time.time()}",
            public_key="bench-key",
            batch_size=batch,
            params=poc_pb2.PocParams(model=model, seq_len=seq_len),
        )
        round_id = (await poc.StartRound(request)).status.round_id
        await asyncio.sleep(seconds)
        status = (await poc.StopRound(poc_pb2.StopRoundRequest(round_id=round_id))).status
    return {"nonces_per_min": 60 * status.nonces_per_second_round, "groups": len(status.groups)}


async def served_model(target: str) -> str:
    async with AsyncInferenceClient(target) as client:
        return (await client.model_info()).served_model_name


def cycle_figures(
    servers: list[tuple[Configuration, ServerProcess]], args: argparse.Namespace, cycle: int, model: str
) -> dict[str, dict]:
    seq_len, batch = (int(part) for part in args.shape.lower().split("x"))
    order = servers[cycle % len(servers) :] + servers[: cycle % len(servers)]
    figures = {}
    for configuration, server in order:
        inference = asyncio.run(streams_round(server.target, server.pid, args.streams, args.tokens, seed=1000 * cycle))
        mining = asyncio.run(mining_round(server.target, model, seq_len, batch, args.seconds))
        figures[configuration.label] = {**inference, **mining}
        print(
            f"  cycle {cycle + 1}, {configuration.label}: {inference['tokens_per_s']:.0f} tokens/s, "
            f"{inference['api_cpu_us_per_token']:.1f} µs API CPU/token, {mining['nonces_per_min']:.0f} nonces/min",
            flush=True,
        )
    return figures


def machine() -> dict[str, Any]:
    import vllm

    model_name = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    return {
        "cpu": model_name,
        "cores": os.cpu_count(),
        "vllm": vllm.__version__,
        "python": platform.python_version(),
        "load_average": os.getloadavg(),
        "date": time.strftime("%Y-%m-%d %H:%M"),
    }


def report(labels: list[str], cycles: list[dict[str, dict]]) -> list[str]:
    first, second = labels
    lines = [f"{'':28}{first:>22}{second:>22}{'ratio (2nd/1st)':>18}"]
    for key, name in (
        ("tokens_per_s", "tokens/s"),
        ("api_cpu_us_per_token", "API CPU µs per token"),
        ("nonces_per_min", "PoC nonces/min"),
    ):
        values = [median(cycle[label][key] for cycle in cycles) for label in labels]
        ratio = median(cycle[second][key] / cycle[first][key] for cycle in cycles if cycle[first][key])
        lines.append(f"{name:28}{values[0]:>22.1f}{values[1]:>22.1f}{ratio:>18.3f}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--compare", choices=("scaling", "baseline"), default="scaling")
    parser.add_argument("--baseline-src", help="the baseline checkout (--compare baseline)")
    parser.add_argument("--model", help="model directory (default: the embedded model)")
    parser.add_argument("--server-flags", default="", help="more flags for both servers (vLLM's engine flags)")
    parser.add_argument("--streams", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--shape", default="256x32", help="the mining round's seq_len x batch (default: %(default)s)")
    parser.add_argument("--seconds", type=float, default=10.0, help="each mining round's length")
    parser.add_argument("--repeats", type=int, default=3, help="measured cycles")
    parser.add_argument("--kv-cache-gib", type=int, default=1, help="VLLM_CPU_KVCACHE_SPACE per instance (CPU)")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    # Named, not left to the default: a baseline checkout has no models of its own.
    args.model_flags = ["--model", args.model or str(DEFAULT_MODEL_DIR)]
    configured = configurations(args)
    log_dir = Path(tempfile.mkdtemp(prefix="instances-bench-"))
    servers: list[tuple[Configuration, ServerProcess]] = []
    try:
        for configuration in configured:
            servers.append((configuration, start(configuration, args, log_dir)))
        model = asyncio.run(served_model(servers[0][1].target))
        print("warm-up (untimed)", flush=True)
        for _, server in servers:
            asyncio.run(streams_round(server.target, server.pid, 8, 16, seed=7))
            asyncio.run(mining_round(server.target, model, 16, 4, 2.0))
        cycles = [cycle_figures(servers, args, cycle, model) for cycle in range(args.repeats)]
    finally:
        for _, server in servers:
            server.stop()
    labels = [configuration.label for configuration in configured]
    described = machine()
    print(
        f"\n{described}\n{args.streams} streams x {args.tokens} tokens; mining {args.shape} for {args.seconds:g} s; "
        f"{args.repeats} cycles; server flags: {args.server_flags or '(none)'}; logs in {log_dir}"
    )
    print("\n".join(report(labels, cycles)))
    if args.json:
        Path(args.json).write_text(
            json.dumps({"machine": described, "arguments": vars(args), "cycles": cycles}, indent=2)
        )


if __name__ == "__main__":
    main()
