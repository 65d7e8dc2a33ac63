"""The PoC forward alone, in one engine: compiled against eager, both against vLLM's own prefill of the
same tokens. Prints figures; asserts nothing about speed.

One vLLM engine runs in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0, with the project's worker
extension); each PoC batch is the worker extension's own method (engine_ext.poc.worker_forward),
called by collective_rpc, as the engine core calls it. Per shape (seq_len x batch), in rounds that alternate the three:
- eager: the forward on vLLM's own kernels, one op at a time;
- compiled: the same stack compiled by torch.compile (the server's default, --poc-forward);
- prefill: vLLM's LLM.generate of `batch` prompts of `seq_len` random token ids, max_tokens 1, prefix
  caching off: one engine step of the same tokens through the model's own compiled graph.
Each figure is the median over --repeats of one batch's wall time (forward only for the PoC forms,
measured as the worker measures it; the whole generate call for the prefill, which adds scheduling
and one sampled token). Also printed: the compile time of the first compiled batch, and the largest
L2 distance between the artifacts of the two PoC forms (the bound the project holds is 0.02).
With --profile, one batch of each form runs under torch.profiler and the top kernels by device
time are printed (a GPU host: CUDA time, then where the device sat idle, benchmarks/trace_gaps.py;
a CPU host: CPU time); --trace-dir also writes each profiled batch's timeline (Chrome trace JSON).
The profiler sees this process only: where vLLM runs its worker in a process of its own (vLLM 0.20
on a CPU always does), the profile is left out and the bench says so.

The KV blocks of the PoC batch are the pool's first free ones: the engine serves nothing else here.
Usage, from the repository root:

    .venv/bin/python benchmarks/poc_forward_bench.py --shapes 1024x8 256x32
    python3 benchmarks/poc_forward_bench.py --model .build/models/qwen3-8b-shape --shapes 1024x32 \\
        --engine-args '{"load_format": "dummy", "max_model_len": 4096, "gpu_memory_utilization": 0.85}' --profile
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from statistics import median
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.poc_bench import parse_shape
from benchmarks.trace_gaps import report as idle_report

BLOCK_HASH = "0x5eed"
PUBLIC_KEY = "bench-public-key"
K_DIM = 12
# The profiled batch's range in the trace: the window its idle time is measured in.
PROFILED_RANGE = "poc_batch"


def build_engine(model: str | None, engine_args: dict[str, Any]) -> Any:
    from vllm import LLM

    from engine_ext.worker_extension import WORKER_EXTENSION_CLASS
    from server.embedded_model import DEFAULT_MODEL_DIR

    settings = {"max_num_batched_tokens": 32768, "max_model_len": 4096, **engine_args}
    return LLM(
        model=model or str(DEFAULT_MODEL_DIR),
        worker_extension_cls=WORKER_EXTENSION_CLASS,
        enable_prefix_caching=False,
        **settings,
    )


def worker_in_this_process(llm: Any) -> bool:
    # The in-process engine core's executor holds its worker itself only when it runs none in a process of its own.
    return hasattr(llm.llm_engine.engine_core.engine_core.model_executor, "driver_worker")


class Shape:
    def __init__(self, llm: Any, seq_len: int, batch: int) -> None:
        from engine_ext.poc.batch import PocBatch
        from engine_ext.poc.forward_metadata import blocks_per_sequence, group_block_sizes

        self.llm, self.seq_len, self.batch = llm, seq_len, batch
        kv_cache_config = llm.llm_engine.engine_core.engine_core.scheduler.kv_cache_config
        per_sequence = blocks_per_sequence(seq_len, group_block_sizes(kv_cache_config))
        # Block 0 is vLLM's null block; the pool's others are free in this idle engine.
        self.block_ids = [[1 + row * per_sequence + j for j in range(per_sequence)] for row in range(batch)]
        self.poc_batch = PocBatch(BLOCK_HASH, PUBLIC_KEY, tuple(range(batch)), seq_len, K_DIM, False)
        rng = random.Random(seq_len * 1000 + batch)
        # The model's rows bound the ids (a shape variant may have fewer than the Qwen tokenizer's ids).
        vocab_size = llm.llm_engine.vllm_config.model_config.get_vocab_size()
        self.prompts = [{"prompt_token_ids": [rng.randrange(vocab_size) for _ in range(seq_len)]} for _ in range(batch)]

    def poc(self, compiled: bool) -> tuple[float, bytes]:
        from engine_ext.poc.batch import PocBatchResult
        from engine_ext.poc.block_lease import WORKER_METHOD

        replies = self.llm.collective_rpc(WORKER_METHOD, args=(self.poc_batch.to_wire(), self.block_ids, compiled))
        result = PocBatchResult.from_wire(replies[0])
        if result.status != "ok":
            raise RuntimeError(f"PoC batch came back {result.status}: {result.detail}")
        return result.forward_seconds, result.vectors

    def prefill(self) -> float:
        from vllm import SamplingParams

        started = time.perf_counter()
        self.llm.generate(self.prompts, SamplingParams(max_tokens=1, temperature=0.0), use_tqdm=False)
        return time.perf_counter() - started


def largest_l2(a: bytes, b: bytes) -> float:
    import numpy as np

    x = np.frombuffer(a, dtype="<f2").astype(np.float32).reshape(-1, K_DIM)
    y = np.frombuffer(b, dtype="<f2").astype(np.float32).reshape(-1, K_DIM)
    return float(np.linalg.norm(x - y, axis=1).max())


def profile_table(run: Any, rows: int, trace: Path | None) -> str:
    """The top kernels of one run; on a GPU also where the device sat idle (benchmarks/trace_gaps.py), since
    time the GPU spends waiting for launches (or for a host sync) shows in no kernel's row."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    cuda = torch.cuda.is_available()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        if cuda:
            torch.cuda.synchronize()
        with record_function(PROFILED_RANGE):
            run()
            if cuda:
                torch.cuda.synchronize()
    sort_by = "cuda_time_total" if cuda else "self_cpu_time_total"
    table = prof.key_averages().table(sort_by=sort_by, row_limit=rows, max_name_column_width=70)
    if not cuda:
        if trace is not None:
            prof.export_chrome_trace(str(trace))
        return table
    # The idle report reads the timeline back: written where --trace-dir keeps it, else to a scratch file.
    with tempfile.TemporaryDirectory() as scratch:
        timeline = trace or Path(scratch) / "trace.json"
        prof.export_chrome_trace(str(timeline))
        return f"{table}\n{idle_report(timeline, PROFILED_RANGE, rows)}"


def measure(shape: Shape, repeats: int, profile: bool, rows: int, trace_dir: Path | None) -> dict[str, Any]:
    started = time.perf_counter()
    _, compiled_vectors = shape.poc(compiled=True)
    first_compiled = time.perf_counter() - started
    _, eager_vectors = shape.poc(compiled=False)
    shape.prefill()
    times: dict[str, list[float]] = {"eager": [], "compiled": [], "prefill": []}
    forms = {
        "eager": lambda: shape.poc(compiled=False)[0],
        "compiled": lambda: shape.poc(compiled=True)[0],
        "prefill": shape.prefill,
    }
    order = list(forms)
    for cycle in range(repeats):
        for name in order[cycle % 3 :] + order[: cycle % 3]:
            times[name].append(forms[name]())
    figures: dict[str, Any] = {name: median(values) for name, values in times.items()}
    figures["first_compiled_batch_s"] = first_compiled
    figures["artifact_l2_max"] = largest_l2(eager_vectors, compiled_vectors)
    report(shape, figures)
    if profile and not worker_in_this_process(shape.llm):
        print("--profile: vLLM runs its worker in a process of its own here; no profile", flush=True)
    elif profile:
        figures["profiles"] = {}
        for name, run in forms.items():
            trace = trace_dir / f"{shape.seq_len}x{shape.batch}-{name}.json" if trace_dir else None
            figures["profiles"][name] = table = profile_table(run, rows, trace)
            print(f"--- {shape.seq_len}x{shape.batch} {name}: top kernels\n{table}", flush=True)
    return figures


def report(shape: Shape, figures: dict[str, Any]) -> None:
    print(
        f"{shape.seq_len}x{shape.batch}: eager {figures['eager'] * 1e3:.1f} ms, compiled {figures['compiled'] * 1e3:.1f} ms, "
        f"vLLM prefill {figures['prefill'] * 1e3:.1f} ms per batch | eager/compiled {figures['eager'] / figures['compiled']:.3f}, "
        f"prefill/compiled {figures['prefill'] / figures['compiled']:.3f}, prefill/eager {figures['prefill'] / figures['eager']:.3f} | "
        f"first compiled batch {figures['first_compiled_batch_s']:.1f} s | artifacts eager vs compiled: L2 max "
        f"{figures['artifact_l2_max']:.4f}",
        flush=True,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--shapes", nargs="+", default=["1024x8", "256x32"], help="seq_len x batch (default: %(default)s)"
    )
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--model", help="model directory (default: the embedded model)")
    parser.add_argument("--engine-args", default="{}", help="more vLLM engine arguments, a JSON object")
    parser.add_argument("--profile", action="store_true", help="print the top kernels of one batch of each form")
    parser.add_argument("--profile-rows", type=int, default=25)
    parser.add_argument(
        "--trace-dir",
        type=Path,
        help="with --profile: also write each profiled batch's timeline here (Chrome trace JSON)",
    )
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    if args.trace_dir:
        args.trace_dir.mkdir(parents=True, exist_ok=True)
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    llm = build_engine(args.model, json.loads(args.engine_args))
    results = {}
    for text in args.shapes:
        seq_len, batch = parse_shape(text)
        figures = measure(Shape(llm, seq_len, batch), args.repeats, args.profile, args.profile_rows, args.trace_dir)
        results[text] = figures
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
