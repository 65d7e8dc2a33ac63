"""The GPU's measured matmul peak, the denominator of the PoC forward's model FLOP utilisation.

Times large square matmuls on the current CUDA device in bf16 (torch.matmul) and FP8 e4m3 with per-tensor scales
(torch._scaled_mm, the kernel class FP8 linears reach), and prints the best TFLOP/s of each over --repeats timed
runs. A measured peak, not the datasheet's: the utilisation it gives reads against what this GPU, driver and torch
reach today. Prints figures; asserts nothing.

Usage on a GPU host (docs/gpu.md): `python3 benchmarks/gpu_peak.py --json peak.json`
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

import torch


def _best_tflops(run: Callable[[], object], flops: float, repeats: int, iterations: int) -> float:
    for _ in range(3):  # warm-up: cuBLAS picks its algorithm on the first calls
        run()
    best = 0.0
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iterations):
            run()
        end.record()
        torch.cuda.synchronize()
        seconds = start.elapsed_time(end) / 1000 / iterations
        best = max(best, flops / seconds / 1e12)
    return best


def measure(size: int, repeats: int, iterations: int) -> dict[str, float]:
    device = torch.device("cuda")
    a = torch.randn(size, size, device=device, dtype=torch.bfloat16)
    b = torch.randn(size, size, device=device, dtype=torch.bfloat16)
    flops = 2.0 * size**3
    figures = {"bf16_tflops": _best_tflops(lambda: torch.matmul(a, b), flops, repeats, iterations)}
    a8 = a.to(torch.float8_e4m3fn)
    # _scaled_mm wants its second operand column-major.
    b8 = b.to(torch.float8_e4m3fn).t().contiguous().t()
    one = torch.ones((), device=device, dtype=torch.float32)
    figures["fp8_tflops"] = _best_tflops(
        lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16),
        flops,
        repeats,
        iterations,
    )
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=8192, help="the square matmul's side")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=20, help="matmuls per timed run")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    figures = {"device": torch.cuda.get_device_name(), "size": args.size} | measure(
        args.size, args.repeats, args.iterations
    )
    print(
        f"{figures['device']}: {args.size}^3 matmul, best of {args.repeats} x {args.iterations}: "
        f"bf16 {figures['bf16_tflops']:.0f} TFLOP/s, fp8 e4m3 {figures['fp8_tflops']:.0f} TFLOP/s"
    )
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
