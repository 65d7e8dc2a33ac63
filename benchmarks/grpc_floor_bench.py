"""What one streamed gRPC message costs a Python grpc.aio server on its own, with no engine behind it.

A minimal server (grpc.aio on uvloop, as this project's) answers InferenceService.Generate with
canned one-token TokenBatch messages, every stream emitting one message per simulated engine step,
as the real server does at a steady batch. Its process CPU per message (utime+stime from /proc) is
the floor under serving_bench.py's "API CPU per token" for any Python gRPC server of this shape:
what is above it is the frontend's own work. Prints figures; asserts nothing.

    .venv/bin/python benchmarks/grpc_floor_bench.py [--streams 64] [--steps 128] [--repeats 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import psutil
import uvloop

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT / "clients" / "python"))

from gonka.mlnode.client import AsyncInferenceClient, build_request  # noqa: E402
from gonka.mlnode.v1 import inference_pb2 as pb  # noqa: E402
from gonka.mlnode.v1 import inference_pb2_grpc as pb_grpc  # noqa: E402

STEP_SECONDS = 0.1
PROMPT_IDS = [9707, 1879, 11, 419, 374, 264, 1273]


class EngineSteps:
    """Wakes every waiting stream once per simulated engine step."""

    def __init__(self) -> None:
        self._waiters: list[asyncio.Future[None]] = []

    async def run(self) -> None:
        while True:
            await asyncio.sleep(STEP_SECONDS)
            waiters, self._waiters = self._waiters, []
            for waiter in waiters:
                waiter.set_result(None)

    async def next_step(self) -> None:
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        await waiter


class CannedInference(pb_grpc.InferenceServiceServicer):
    def __init__(self, steps: EngineSteps) -> None:
        self._steps = steps

    async def Generate(
        self, request: pb.GenerateRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.GenerateResponse]:
        k = request.logprobs.top_logprobs if request.HasField("logprobs") else 0
        for position in range(request.sampling.max_tokens):
            await self._steps.next_step()
            message = pb.GenerateResponse(request_id=request.request_id)
            batch = message.tokens
            batch.ids.append(1000 + position)
            if k:
                batch.logprobs.append(-1.5)
                batch.ranks.append(3)
                batch.top_k = k
                batch.top_ids.extend(range(k))
                batch.top_logprobs.extend([-0.5] * k)
            yield message


async def serve(port: int) -> None:
    steps = EngineSteps()
    stepping = asyncio.create_task(steps.run())
    server = grpc.aio.server()
    pb_grpc.add_InferenceServiceServicer_to_server(CannedInference(steps), server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    try:
        await server.wait_for_termination()
    finally:
        stepping.cancel()


def process_cpu_seconds(pid: int) -> float:
    """utime + stime of the process (all its threads), as psutil reads them from /proc/<pid>/stat."""
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


async def measure(pid: int, port: int, streams: int, steps: int, k: int) -> float:
    """Server CPU µs per message over one round of `streams` concurrent streams (after a warm-up)."""
    async with AsyncInferenceClient(f"127.0.0.1:{port}") as client:

        async def one_stream() -> int:
            request = build_request(token_ids=PROMPT_IDS, max_tokens=steps, top_logprobs=k or None)
            return sum([len(response.tokens.ids) async for response in client.stream(request)])

        await asyncio.gather(*(one_stream() for _ in range(streams)))
        before = process_cpu_seconds(pid)
        messages = sum(await asyncio.gather(*(one_stream() for _ in range(streams))))
        return (process_cpu_seconds(pid) - before) / messages * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=64)
    parser.add_argument("--steps", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)  # the server subprocess
    args = parser.parse_args()
    if args.serve:
        uvloop.run(serve(args.serve))
        return
    port = 50000 + os.getpid() % 10000
    server = subprocess.Popen([sys.executable, __file__, "--serve", str(port)])
    try:
        time.sleep(3)
        resolution = 1e6 / os.sysconf("SC_CLK_TCK") / (args.streams * args.steps)
        print(
            f"grpc {grpc.__version__}, {args.streams} streams x {args.steps} messages, one message per stream every "
            f"{STEP_SECONDS * 1000:.0f} ms; server CPU per message (±{resolution:.1f} µs):"
        )
        # Alternated, not one after the other: the machine's speed drifts by 10-15% over minutes.
        figures: dict[int, list[float]] = {0: [], 5: []}
        for _ in range(args.repeats):
            for k, measured in figures.items():
                measured.append(asyncio.run(measure(server.pid, port, args.streams, args.steps, k)))
        for k, measured in figures.items():
            print(f"  top-{k} logprobs: " + ", ".join(f"{figure:.1f}" for figure in measured) + " µs/message")
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
