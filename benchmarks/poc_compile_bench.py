"""The compiled PoC forward's start-up: the whole layer stack unrolled into one graph (the scheme before) against one
graph per layer kind reused across the layers (engine_ext.poc.compiled_layers), on one engine. Prints figures;
asserts nothing about time.

Each scheme runs in a fresh process of its own (a fresh host: inductor's on-disk caches off), one vLLM engine in it
(VLLM_ENABLE_V1_MULTIPROCESSING=0) with the project's worker extension, on a deep model (by default the embedded
Qwen3 16 layers deep, built on first use). The first PoC batch compiles: its wall time, the graphs inductor compiled
and the seconds that took; then the batch again (warm), median of --repeats. The eager forward (vLLM's kernels)
runs the same batch: the artifacts of each scheme are compared with it and with each other (L2, the project's
bound 0.02). On a CPU shared with other work, run with OMP_WAIT_POLICY=PASSIVE: OpenMP threads that spin between
kernels take the cores from the next kernel's threads, which made single batches 10 to 50 times slower at random.

    PYTHONPATH=.:clients/python .venv/bin/python benchmarks/poc_compile_bench.py
    python3 benchmarks/poc_compile_bench.py --model .build/models/qwen3-8b-shape --shape 1024x32 \\
        --engine-args '{"load_format": "dummy", "max_model_len": 4096, "gpu_memory_utilization": 0.85}'
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.poc_bench import parse_shape
from benchmarks.poc_forward_bench import Shape, build_engine, largest_l2


class WholeStack:
    """The scheme before: torch.compile of the whole layer stack, dynamo unrolling every layer into one graph."""

    def __init__(self) -> None:
        import torch

        from engine_ext.poc.compiled_layers import CountingInductor
        from engine_ext.poc.layer_stack import run_stack

        self.backend = CountingInductor()
        self._compiled = torch.compile(run_stack, backend=self.backend, dynamic=False)

    def __call__(
        self, decoder: Any, positions: Any, inputs_embeds: Any, input_ids: Any, vectors: Any, rows: Any
    ) -> Any:
        from engine_ext.poc.compiled_layers import mark_token_dimension
        from engine_ext.poc.layer_stack import reflected_last_layer, reflected_layer

        mark_token_dimension(positions, inputs_embeds, input_ids, rows)
        return self._compiled(
            decoder, positions, inputs_embeds, input_ids, vectors, rows, reflected_layer, reflected_last_layer
        )

    @property
    def graphs(self) -> int:
        return self.backend.graphs

    @property
    def compile_seconds(self) -> float:
        return self.backend.seconds


SCHEMES = {"whole stack (before)": "whole-stack", "per layer kind (now)": "per-layer-kind"}


def poc_forward_of(llm: Any) -> Any:
    """The PocWorkerForward of the in-process worker (made on first use)."""
    return llm.llm_engine.engine_core.engine_core.model_executor.driver_worker.worker._mlnode_poc()


def run_scheme(args: argparse.Namespace) -> dict[str, Any]:
    """In this process: the eager batch, then the scheme's first (compiling) batch and its warm ones."""
    from engine_ext.poc.compiled_layers import CompiledLayers

    llm = build_engine(args.model, json.loads(args.engine_args))
    seq_len, batch = parse_shape(args.shape)
    shape = Shape(llm, seq_len, batch)
    _, eager = shape.poc(compiled=False)
    forward = poc_forward_of(llm)
    scheme = WholeStack() if args.scheme == "whole-stack" else CompiledLayers()
    forward._compiled_layers = scheme
    started = time.perf_counter()
    _, vectors = shape.poc(compiled=True)
    first = time.perf_counter() - started
    warm = median(shape.poc(compiled=True)[0] for _ in range(args.repeats))
    eager_batch = median(shape.poc(compiled=False)[0] for _ in range(args.repeats))
    return {
        "layers": len(forward.decoder.layers),
        "first_batch_s": first,
        "graphs": scheme.graphs,
        "inductor_s": scheme.compile_seconds,
        "warm_batch_s": warm,
        "eager_batch_s": eager_batch,
        "vectors": vectors.hex(),
        "eager_vectors": eager.hex(),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--model", help="model directory (default: the embedded Qwen3 16 layers deep, built if missing)"
    )
    parser.add_argument("--shape", default="64x8", help="seq_len x batch (default: %(default)s)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--engine-args", default="{}", help="more vLLM engine arguments, a JSON object")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument(
        "--scheme", choices=list(SCHEMES.values()), help=argparse.SUPPRESS
    )  # one scheme, in this process
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.model is None:
        from server.embedded_model import ensure_embedded_model
        from server.embedded_model.variants import DEEP_VARIANT

        args.model = str(ensure_embedded_model(variant=DEEP_VARIANT))
    if args.scheme:
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        # A fresh host: inductor compiles every graph instead of reading a previous run's.
        os.environ["TORCHINDUCTOR_FX_GRAPH_CACHE"] = "0"
        os.environ["TORCHINDUCTOR_AUTOGRAD_CACHE"] = "0"
        # vLLM's own compile cache saves inductor's artifacts, which the two settings above make unserializable.
        os.environ["VLLM_DISABLE_COMPILE_CACHE"] = "1"
        args.out.write_text(json.dumps(run_scheme(args)))
        return 0
    results = {}
    with tempfile.TemporaryDirectory() as scratch:
        for name, scheme in SCHEMES.items():
            out = Path(scratch) / f"{scheme}.json"
            command = [
                sys.executable,
                __file__,
                "--scheme",
                scheme,
                "--out",
                str(out),
                "--model",
                args.model,
                "--shape",
                args.shape,
                "--repeats",
                str(args.repeats),
                "--engine-args",
                args.engine_args,
            ]
            subprocess.run(command, check=True)
            results[name] = figures = json.loads(out.read_text())
            print(
                f"{name}: first batch {figures['first_batch_s']:.1f} s ({figures['graphs']} graphs, {figures['inductor_s']:.1f} s "
                f"in inductor), then {figures['warm_batch_s'] * 1e3:.1f} ms a batch (eager {figures['eager_batch_s'] * 1e3:.1f} ms)",
                flush=True,
            )
    before, now = (bytes.fromhex(results[name]["vectors"]) for name in SCHEMES)
    eager = bytes.fromhex(results["per layer kind (now)"]["eager_vectors"])
    print(
        f"{Path(args.model).name}: {results['per layer kind (now)']['layers']} layers, batch {args.shape} | artifacts: per layer kind vs "
        f"whole stack L2 max {largest_l2(now, before):.4f}, vs eager {largest_l2(now, eager):.4f}; whole stack vs eager "
        f"{largest_l2(before, eager):.4f}",
        flush=True,
    )
    if args.json:
        args.json.write_text(
            json.dumps(
                {name: {k: v for k, v in f.items() if "vectors" not in k} for name, f in results.items()}, indent=2
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
