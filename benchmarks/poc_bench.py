"""PoC benchmark: mining rounds against vLLM's own prefill of the same shape, the gate's timings, and
ValidatePocArtifacts beside live inference. Prints figures; asserts nothing about speed.

It starts this server once (`python -m server`, the embedded model, prefix caching off, the default
--max-num-batched-tokens 32768) and measures, side by side in that one engine:

1. Mining against the prefill reference, per shape (seq_len x batch; default 256 x 32 and 1024 x 8).
   Reference: `batch` concurrent Generate streams of `seq_len` random token ids, max_tokens 1, each
   replaced as soon as it finishes, for --seconds: its sequences/s is what serving those tokens costs.
   Mining: a round of that shape for --seconds; its nonces/s (first forward issued to last returned,
   GetRoundStatus), StartRound -> first batch, and the time per batch outside the forward. Each cycle
   runs both, in an order alternated from cycle to cycle; the ratio is formed within a cycle and the
   median over --repeats cycles is printed. Goal line: mining >= 1.0 x the reference.
2. The gate: 64 streams in flight, StartRound sent -> the last stream closed (goal <= 100 ms); then
   StopRound sent -> the first message of a new Generate, whole and split into the wait for the
   forward in flight (seconds_stop_to_last_forward, measured by the server) and the rest (goal
   <= 40 ms).
3. ValidatePocArtifacts of --validate-nonces nonces at seq_len 256 while 16 greedy streams run:
   nonces/s, and the streams' tokens/s during the validation against the same streams alone.

Usage, from the repository root:

    .venv/bin/python benchmarks/poc_bench.py
    .venv/bin/python benchmarks/poc_bench.py --repeats 1 --seconds 5 --shapes 64x8
    # a GPU host (docs/gpu.md), the Qwen3-8B shape with random weights, the network's batch, against the anchor
    # (the deployed fork's 2,197 nonces/min there: docs/benchmarks.md); the chart lands beside the JSON:
    python3 benchmarks/poc_bench.py --model .build/models/qwen3-8b-shape --shapes 1024x32 \
        --server-flags "--load-format dummy --max-model-len 4096 --gpu-memory-utilization 0.85" \
        --anchor 1024x32=2197 --json poc-qwen3-8b-shape.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shlex
import sys
import tempfile
import time
from pathlib import Path
from statistics import median
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import grpc

from benchmarks.serving.charts import chart_beside, parse_anchor
from gonka.mlnode.client import AsyncInferenceClient, ServerError
from gonka.mlnode.v1 import (
    poc_pb2,
    poc_pb2_grpc,
    validation_pb2_grpc,
)
from gonka.mlnode.v1 import validation_pb2 as vpb
from tests.support.server_process import start_server

PROMPT_IDS = [9707, 1879, 11, 419, 374, 264, 1273]
SERVER_FLAGS = ["--no-enable-prefix-caching", "--max-num-seqs", "128"]
K = 12


def parse_shape(text: str) -> tuple[int, int]:
    seq_len, batch = text.lower().split("x")
    return int(seq_len), int(batch)


async def reference_prefill(client: AsyncInferenceClient, seq_len: int, batch: int, seconds: float) -> float:
    """Sequences/s of `batch` concurrent one-token generations of `seq_len` random prompt tokens."""
    rng = random.Random(seq_len * 1000 + batch)
    # The model's rows, not the tokenizer's ids: a model may have fewer rows than the tokenizer (the DeepSeek-V4
    # shape's 129,280 beside the Qwen tokenizer's 151,669).
    vocab_size = (await client.model_info()).vocab_size
    done = 0
    deadline = time.monotonic() + seconds

    async def worker() -> None:
        nonlocal done
        while time.monotonic() < deadline:
            prompt = [rng.randrange(vocab_size) for _ in range(seq_len)]
            await client.generate(token_ids=prompt, max_tokens=1, temperature=0.0)
            done += 1

    started = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(batch)))
    return done / (time.monotonic() - started)


async def mining(
    poc: Any, model: str, seq_len: int, batch: int, seconds: float, callback_url: str = ""
) -> poc_pb2.RoundStatus:
    """A round of this shape for `seconds`, stopped; its final status (artifacts POSTed to `callback_url`, if given)."""
    request = poc_pb2.StartRoundRequest(
        block_hash=f"bench-{time.time()}",
        block_height=1,
        public_key="bench-key",
        params=poc_pb2.PocParams(model=model, seq_len=seq_len),
        batch_size=batch,
        callback_url=callback_url,
    )
    round_id = (await poc.StartRound(request)).status.round_id
    try:
        await asyncio.sleep(seconds)
    finally:
        status = (await poc.StopRound(poc_pb2.StopRoundRequest(round_id=round_id))).status
    return status


async def gate_timings(client: AsyncInferenceClient, poc: Any, model: str, streams: int) -> dict[str, float]:
    first = [asyncio.Event() for _ in range(streams)]

    async def stream(index: int) -> float:
        try:
            async for _ in client.stream(
                token_ids=PROMPT_IDS, max_tokens=4000, ignore_eos=True, temperature=0.0, include_text=index % 2 == 1
            ):
                first[index].set()
        except ServerError as error:
            if error.reason != "POC_PREEMPTED":
                raise
        return time.monotonic()

    tasks = [asyncio.create_task(stream(i)) for i in range(streams)]
    await asyncio.gather(*(event.wait() for event in first))
    request = poc_pb2.StartRoundRequest(
        block_hash="bench-gate",
        block_height=1,
        public_key="bench-key",
        params=poc_pb2.PocParams(model=model, seq_len=256),
        batch_size=32,
    )
    sent = time.monotonic()
    await poc.StartRound(request)
    closed = max(await asyncio.gather(*tasks))
    await asyncio.sleep(2.0)
    stop_sent = time.monotonic()
    status = (await poc.StopRound(poc_pb2.StopRoundRequest())).status
    async for _ in client.stream(token_ids=PROMPT_IDS, max_tokens=1, temperature=0.0):
        accepted = time.monotonic()
        break
    whole = accepted - stop_sent
    return {
        "start_to_last_stream_closed_ms": 1000 * (closed - sent),
        "stop_to_first_generate_ms": 1000 * whole,
        "stop_wait_for_forward_ms": 1000 * status.seconds_stop_to_last_forward,
        "stop_rest_ms": 1000 * (whole - status.seconds_stop_to_last_forward),
    }


async def validation_beside_inference(
    client: AsyncInferenceClient, channel: Any, model: str, nonces: int, window: float
) -> dict[str, float]:
    poc = poc_pb2_grpc.PocServiceStub(channel)
    validation = validation_pb2_grpc.ValidationServiceStub(channel)
    params = poc_pb2.PocParams(model=model, seq_len=256)
    claims: list[vpb.ClaimedArtifact] = []
    async for message in poc.ComputeArtifacts(
        poc_pb2.ComputeArtifactsRequest(
            block_hash="bench-validate", public_key="bench-key", params=params, nonces=list(range(nonces))
        )
    ):
        for index, nonce in enumerate(message.batch.nonces):
            claims.append(
                vpb.ClaimedArtifact(nonce=nonce, vector_f16=message.batch.vectors[2 * K * index : 2 * K * (index + 1)])
            )
    tokens = 0
    stop = asyncio.Event()

    async def stream(index: int) -> None:
        nonlocal tokens
        while not stop.is_set():
            async for response in client.stream(
                token_ids=PROMPT_IDS + [index], max_tokens=2000, ignore_eos=True, temperature=0.0
            ):
                tokens += len(response.tokens.ids)
                if stop.is_set():
                    break

    streams = [asyncio.create_task(stream(i)) for i in range(16)]
    await asyncio.sleep(3.0)  # every stream past its prefill
    base_tokens, base_started = tokens, time.monotonic()
    await asyncio.sleep(window)
    alone = (tokens - base_tokens) / (time.monotonic() - base_started)
    during_tokens, started = tokens, time.monotonic()
    request = vpb.ValidatePocArtifactsRequest(
        block_hash="bench-validate",
        public_key="bench-key",
        params=params,
        artifacts=claims,
        stat_test=vpb.PocStatTest(dist_threshold=0.2, p_mismatch=0.1, p_value_threshold=0.05),
    )
    summary = [r async for r in validation.ValidatePocArtifacts(request)][-1].summary
    elapsed = time.monotonic() - started
    during = (tokens - during_tokens) / elapsed
    stop.set()
    await asyncio.gather(*streams)
    if summary.n_mismatch:
        raise RuntimeError(f"the server's own artifacts failed validation: {summary}")
    return {
        "validate_nonces_per_s": nonces / elapsed,
        "inference_tokens_per_s_alone": alone,
        "inference_tokens_per_s_during": during,
        "inference_tokens_lost_fraction": 1 - during / alone,
    }


async def run(args: argparse.Namespace, target: str) -> dict[str, Any]:
    results: dict[str, Any] = {"shapes": {}}
    async with AsyncInferenceClient(target) as client, grpc.aio.insecure_channel(target) as channel:
        poc = poc_pb2_grpc.PocServiceStub(channel)
        model = (await client.model_info()).served_model_name
        results["model"] = model
        shapes = [parse_shape(shape) for shape in args.shapes]
        for seq_len, batch in shapes:  # untimed warm-up of both paths
            await reference_prefill(client, seq_len, batch, 2.0)
            await mining(poc, model, seq_len, batch, 2.0)
        for seq_len, batch in shapes:
            cycles = []
            for cycle in range(args.repeats):
                order = ("reference", "mining") if cycle % 2 == 0 else ("mining", "reference")
                figures: dict[str, Any] = {}
                for kind in order:
                    if kind == "reference":
                        figures["reference_seq_per_s"] = await reference_prefill(client, seq_len, batch, args.seconds)
                    else:
                        status = await mining(poc, model, seq_len, batch, args.seconds)
                        figures.update(
                            mining_nonces_per_s=status.nonces_per_second_round,
                            start_to_first_batch_s=status.seconds_to_first_batch,
                            outside_forward_ms_per_batch=1000 * status.seconds_outside_forward_per_batch,
                            forward_ms_per_batch=1000 * status.forward_seconds_per_batch,
                        )
                figures["ratio"] = figures["mining_nonces_per_s"] / figures["reference_seq_per_s"]
                cycles.append(figures)
                print(
                    f"  {seq_len}x{batch} cycle {cycle + 1}: {json.dumps({k: round(v, 4) for k, v in figures.items()})}",
                    flush=True,
                )
            summary = {key: median(c[key] for c in cycles) for key in cycles[0]}
            results["shapes"][f"{seq_len}x{batch}"] = {"cycles": cycles, "median": summary}
        gates = [await gate_timings(client, poc, model, 64) for _ in range(args.gate_repeats)]
        results["gate"] = {"runs": gates, "median": {key: median(g[key] for g in gates) for key in gates[0]}}
        results["validation"] = await validation_beside_inference(
            client, channel, model, args.validate_nonces, args.seconds
        )
    return results


def report(results: dict[str, Any]) -> None:
    print("\nPoC benchmark (medians)")
    for shape, entry in results["shapes"].items():
        m = entry["median"]
        verdict = "met" if m["ratio"] >= 1.0 else "NOT met"
        print(
            f"  seq_len x batch {shape}: mining {m['mining_nonces_per_s']:.1f} nonces/s "
            f"({60 * m['mining_nonces_per_s']:.0f}/min), prefill reference "
            f"{m['reference_seq_per_s']:.1f} seq/s, ratio {m['ratio']:.3f} (goal >= 1.0: {verdict}); "
            f"StartRound -> first batch {m['start_to_first_batch_s'] * 1000:.0f} ms; per batch: forward "
            f"{m['forward_ms_per_batch']:.1f} ms, outside it {m['outside_forward_ms_per_batch']:.2f} ms"
        )
    g = results["gate"]["median"]
    print(
        f"  StartRound -> last of 64 streams closed: {g['start_to_last_stream_closed_ms']:.1f} ms "
        f"(goal <= 100: {'met' if g['start_to_last_stream_closed_ms'] <= 100 else 'NOT met'})"
    )
    print(
        f"  StopRound -> first Generate message: {g['stop_to_first_generate_ms']:.1f} ms = wait for the forward in "
        f"flight {g['stop_wait_for_forward_ms']:.1f} ms + the rest {g['stop_rest_ms']:.1f} ms "
        f"(goal for the rest <= 40: {'met' if g['stop_rest_ms'] <= 40 else 'NOT met'})"
    )
    v = results["validation"]
    print(
        f"  ValidatePocArtifacts beside 16 streams: {v['validate_nonces_per_s']:.1f} nonces/s; inference "
        f"{v['inference_tokens_per_s_alone']:.0f} tokens/s alone, {v['inference_tokens_per_s_during']:.0f} during "
        f"({100 * v['inference_tokens_lost_fraction']:.1f}% lost)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--shapes", nargs="+", default=["256x32", "1024x8"], help="seq_len x batch (default: %(default)s)"
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=15.0, help="each measured run's length")
    parser.add_argument("--gate-repeats", type=int, default=3)
    parser.add_argument("--validate-nonces", type=int, default=200)
    parser.add_argument("--json", type=Path, help="also write the figures here, and their chart beside them (.png)")
    parser.add_argument(
        "--anchor",
        type=parse_anchor,
        action="append",
        default=[],
        metavar="SHAPE=NONCES_PER_MIN",
        help="the anchor (the deployed fork's nonces/min) at a shape, recorded for the chart; repeatable",
    )
    parser.add_argument("--model", help="model directory (default: the embedded model)")
    parser.add_argument("--server-flags", default="", help="more server and vLLM flags, one string")
    parser.add_argument(
        "--server-log",
        type=Path,
        help="keep the server's log here (default: a temporary folder, removed after the run)",
    )
    args = parser.parse_args()
    flags = SERVER_FLAGS + (["--model", args.model] if args.model else []) + shlex.split(args.server_flags)
    with tempfile.TemporaryDirectory() as scratch:
        log_path = args.server_log or Path(scratch) / "server.log"
        server = start_server(log_path, flags + ["--callback-store", str(Path(scratch) / "callbacks.sqlite3")])
        try:
            results = asyncio.run(run(args, server.target))
        finally:
            server.stop()
    results["anchors_nonces_per_min"] = dict(args.anchor)
    report(results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
        print(chart_beside("poc", args.json))


if __name__ == "__main__":
    main()
