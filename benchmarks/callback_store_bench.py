"""What the durable callback store costs a mining round: nonces/s of rounds without a callback (nothing is
written) against rounds with one (every batch committed to the store before it is published, and POSTed to a
live receiver every interval), side by side in one server. Prints figures; asserts nothing about speed.

It starts this server once (`python -m server`, the embedded model, its callback store in a temporary
folder) and a receiver on 127.0.0.1 that accepts every POST, then runs --repeats cycles of one round of each
kind (--seconds each, the order alternated from cycle to cycle) and prints the medians: nonces/s (first
forward issued to last returned, the round's own figure), the time per batch outside the forward (where the
store's write falls), and the ratio. First, without a server: one batch's write as a round does it (each
vector in base64, the deployed body, the committed append), timed over --writes batches.

Usage, from the repository root:

    .venv/bin/python benchmarks/callback_store_bench.py
    .venv/bin/python benchmarks/callback_store_bench.py --repeats 5 --seconds 10 --shape 256x32
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
from statistics import median

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import grpc
import numpy as np

from benchmarks.poc_bench import mining
from gonka.mlnode.client import AsyncInferenceClient
from gonka.mlnode.v1 import poc_pb2_grpc
from server.poc.delivery.callback_store import CallbackStore
from server.poc.delivery.callbacks import ArtifactCallback, CallbackIdentity
from server.poc.delivery.store_lock import StoreLock
from tests.support.http_receiver import HttpReceiver
from tests.support.server_process import start_server

K = 12


def write_seconds(folder: Path, writes: int, batch: int) -> float:
    """Median seconds a round spends writing one batch of `batch` artifacts to the store, as it does before
    publishing it (ArtifactCallback.add: each vector in base64, the deployed body, the committed append)."""
    store = CallbackStore(StoreLock.claim(folder / "write-bench.sqlite3"))
    identity = CallbackIdentity(public_key="bench-key", block_hash="bench", block_height=1, node_id=0)
    callback = ArtifactCallback("http://127.0.0.1:1", identity, K, "bench-round", store, flush=lambda: None)
    rng = np.random.default_rng(0)
    times = []
    for index in range(writes):
        nonces = range(index * batch, (index + 1) * batch)
        vectors = rng.standard_normal((batch, K)).astype("<f2").tobytes()
        started = time.perf_counter()
        callback.add(nonces, vectors)
        times.append(time.perf_counter() - started)
    store.close()
    return median(times)


async def run(args: argparse.Namespace, target: str, receiver_url: str) -> list[dict[str, float]]:
    seq_len, batch = (int(part) for part in args.shape.lower().split("x"))
    kinds = {"without": "", "with": receiver_url}
    async with AsyncInferenceClient(target) as client, grpc.aio.insecure_channel(target) as channel:
        poc = poc_pb2_grpc.PocServiceStub(channel)
        model = (await client.model_info()).served_model_name
        for callback_url in kinds.values():  # untimed warm-up
            await mining(poc, model, seq_len, batch, 2.0, callback_url)
        cycles = []
        for cycle in range(args.repeats):
            order = list(kinds) if cycle % 2 == 0 else list(reversed(kinds))
            figures: dict[str, float] = {}
            for kind in order:
                status = await mining(poc, model, seq_len, batch, args.seconds, kinds[kind])
                figures[f"{kind}_nonces_per_s"] = status.nonces_per_second_round
                figures[f"{kind}_outside_forward_ms"] = 1000 * status.seconds_outside_forward_per_batch
            figures["ratio"] = figures["with_nonces_per_s"] / figures["without_nonces_per_s"]
            cycles.append(figures)
            print(
                f"  cycle {cycle + 1}: {json.dumps({key: round(value, 3) for key, value in figures.items()})}",
                flush=True,
            )
    return cycles


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", default="256x32", help="seq_len x batch (default %(default)s)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=10.0, help="each round's length")
    parser.add_argument("--writes", type=int, default=2000)
    parser.add_argument("--server-flags", default="", help="more server and vLLM flags, one string")
    parser.add_argument("--server-log", type=Path, help="keep the server's log here")
    args = parser.parse_args()
    batch = int(args.shape.lower().split("x")[1])
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        write = write_seconds(folder, args.writes, batch)
        print(
            f"one {batch}-artifact batch written to the store, committed: median {1e6 * write:.0f} us over {args.writes}"
        )
        flags = ["--callback-store", str(folder / "callbacks.sqlite3"), *shlex.split(args.server_flags)]
        with HttpReceiver() as receiver:
            server = start_server(args.server_log or folder / "server.log", flags)
            try:
                cycles = asyncio.run(run(args, server.target, receiver.url))
            finally:
                server.stop()
            delivered = sum(len(body["artifacts"]) for body in receiver.received("/generated"))
    summary = {key: median(cycle[key] for cycle in cycles) for key in cycles[0]}
    print(f"\nMining {args.shape}, medians over {args.repeats} cycles of {args.seconds:g} s rounds:")
    print(
        f"  without the callback store: {summary['without_nonces_per_s']:.1f} nonces/s, "
        f"{summary['without_outside_forward_ms']:.2f} ms per batch outside the forward"
    )
    print(
        f"  with it (and a live receiver): {summary['with_nonces_per_s']:.1f} nonces/s, "
        f"{summary['with_outside_forward_ms']:.2f} ms per batch outside the forward"
    )
    print(f"  ratio with / without: {summary['ratio']:.3f}; artifacts the receiver got: {delivered}")


if __name__ == "__main__":
    main()
