"""How soon inference serves again after a mining round: the time from StopRound's reply to the first token
of a Generate sent at that moment, against the same Generate with no round before it. Prints figures;
asserts nothing about speed.

It starts this server once (`python -m server`, the embedded model) and runs --rounds of each kind,
alternated so that a change of the machine's load falls on both alike:
- after a round: StartRound (--seq-len x --batch), --round-seconds of mining, StopRound; at its reply one
  Generate (a 7-token prompt, max_tokens 1) is sent, and the time to its first message is taken;
- no round: the same pause, then the same Generate.
It prints the median, p90 and max of both, and of StopRound itself (sent to reply, with the server's figure
for the part spent waiting for the forward in flight).

Usage, from the repository root:

    .venv/bin/python benchmarks/poc_resume_bench.py
    .venv/bin/python benchmarks/poc_resume_bench.py --rounds 50 --server-flags "--enforce-eager"
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import sys
import tempfile
import time
from pathlib import Path
from statistics import median, quantiles
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import grpc  # noqa: E402

from gonka.mlnode.client import AsyncInferenceClient  # noqa: E402
from gonka.mlnode.v1 import poc_pb2, poc_pb2_grpc  # noqa: E402
from tests.support.server_process import start_server  # noqa: E402

PROMPT_IDS = [9707, 1879, 11, 419, 374, 264, 1273]


async def first_token_seconds(client: AsyncInferenceClient, sent: float) -> float:
    async for _ in client.stream(token_ids=PROMPT_IDS, max_tokens=1, temperature=0.0):
        return time.monotonic() - sent
    raise RuntimeError("the Generate sent no message")


async def after_round(
    client: AsyncInferenceClient, poc: Any, request: poc_pb2.StartRoundRequest, seconds: float
) -> dict[str, float]:
    await poc.StartRound(request)
    await asyncio.sleep(seconds)
    stop_sent = time.monotonic()
    status = (await poc.StopRound(poc_pb2.StopRoundRequest())).status
    replied = time.monotonic()
    return {
        "first_token_ms": 1000 * await first_token_seconds(client, replied),
        "stop_round_ms": 1000 * (replied - stop_sent),
        "stop_wait_for_forward_ms": 1000 * status.seconds_stop_to_last_forward,
    }


async def no_round(client: AsyncInferenceClient, seconds: float) -> dict[str, float]:
    await asyncio.sleep(seconds)
    return {"first_token_ms": 1000 * await first_token_seconds(client, time.monotonic())}


def summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {"median": median(ordered), "p90": quantiles(ordered, n=10)[-1], "max": ordered[-1]}


async def run(args: argparse.Namespace, target: str) -> dict[str, Any]:
    async with AsyncInferenceClient(target) as client, grpc.aio.insecure_channel(target) as channel:
        poc = poc_pb2_grpc.PocServiceStub(channel)
        model = (await client.model_info()).served_model_name
        request = poc_pb2.StartRoundRequest(
            block_hash="bench-resume",
            block_height=1,
            public_key="bench-key",
            params=poc_pb2.PocParams(model=model, seq_len=args.seq_len),
            batch_size=args.batch,
        )
        for _ in range(3):  # untimed warm-up of both paths
            await after_round(client, poc, request, args.round_seconds)
            await no_round(client, args.round_seconds)
        after: list[dict[str, float]] = []
        alone: list[dict[str, float]] = []
        for index in range(args.rounds):
            # Alternated, so that a change of the machine's load falls on both alike.
            if index % 2 == 0:
                after.append(await after_round(client, poc, request, args.round_seconds))
                alone.append(await no_round(client, args.round_seconds))
            else:
                alone.append(await no_round(client, args.round_seconds))
                after.append(await after_round(client, poc, request, args.round_seconds))
    return {
        "after_stop_round": {key: summary([run[key] for run in after]) for key in after[0]},
        "no_round": {key: summary([run[key] for run in alone]) for key in alone[0]},
        "runs": {"after_stop_round": after, "no_round": alone},
    }


def report(results: dict[str, Any], rounds: int) -> None:
    def line(figures: dict[str, float]) -> str:
        return f"median {figures['median']:.1f} ms, p90 {figures['p90']:.1f} ms, max {figures['max']:.1f} ms"

    after, alone = results["after_stop_round"], results["no_round"]
    print(f"\nGenerate's first message, over {rounds} runs each")
    print(f"  sent at StopRound's reply: {line(after['first_token_ms'])}")
    print(f"  with no round before it:   {line(alone['first_token_ms'])}")
    print(
        f"  StopRound itself (sent -> reply): {line(after['stop_round_ms'])}; of which the wait for the forward in "
        f"flight (server's figure): {line(after['stop_wait_for_forward_ms'])}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=50, help="runs of each kind (default %(default)s)")
    parser.add_argument(
        "--round-seconds",
        type=float,
        default=0.5,
        help="mining per round, and the pause before a Generate with no round",
    )
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--server-flags", default="", help="more server and vLLM flags, one string")
    parser.add_argument("--server-log", type=Path, help="keep the server's log here")
    args = parser.parse_args()
    if args.rounds < 2:
        parser.error("--rounds must be at least 2")
    with tempfile.TemporaryDirectory() as scratch:
        log_path = args.server_log or Path(scratch) / "server.log"
        server = start_server(log_path, shlex.split(args.server_flags))
        try:
            results = asyncio.run(run(args, server.target))
        finally:
            server.stop()
    report(results, args.rounds)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
