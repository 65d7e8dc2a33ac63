"""Benchmark: PoC input generation for one batch (default 32 nonces x seq_len 1024 x hidden 4096, bf16).

Compares engine_ext.consensus.generate_inputs (each backend) with the straightforward per-nonce torch
formulation of poc-v2.md (tests/support/spec_reference.py, independent of the library), checks that every output is
bitwise equal to that formulation on the same device, and prints a table of times, throughput and
peak extra device memory. Usage (from the repository root):

    PYTHONPATH=. python benchmarks/poc_inputs_bench.py                  # CUDA if present, else CPU
    PYTHONPATH=. python benchmarks/poc_inputs_bench.py --device cpu --repeats 2
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch

from engine_ext.consensus import generate_inputs
from tests.support.spec_reference import spec_inputs

BH = "00000a1b2c3d4e5f"
PK = "02f3c9e8a7b6d5c4b3a2"
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def spec_batch(out: torch.Tensor, nonces: list[int], stronger: bool) -> None:
    """The straightforward formulation: per nonce, normal(...).view(S, H).to(dtype)."""
    _, seq_len, hidden = out.shape
    for i, nonce in enumerate(nonces):
        out[i] = spec_inputs(BH, PK, nonce, seq_len, hidden, out.dtype, stronger, out.device)


def timed(fn: Callable[[], None], device: torch.device, repeats: int, warmup: int) -> tuple[float, list[float]]:
    """Median milliseconds (device events on CUDA, wall clock on CPU) and all samples."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeats):
        if device.type == "cuda":
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            stop.record()
            stop.synchronize()
            samples.append(start.elapsed_time(stop))
        else:
            t0 = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(samples), samples


def peak_extra_mib(fn: Callable[[], None], device: torch.device) -> float | None:
    """Device memory allocated during fn beyond what was allocated before it (CUDA only)."""
    if device.type != "cuda":
        return None
    torch.cuda.synchronize(device)
    base = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    fn()
    torch.cuda.synchronize(device)
    return (torch.cuda.max_memory_allocated(device) - base) / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seq-len", type=int, default=1024)
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    parser.add_argument("--repeats", type=int, default=None, help="timed runs per variant (default 20 CUDA, 2 CPU)")
    parser.add_argument(
        "--tiles", default="", help="comma list of tile sizes (log2) to sweep for every backend, e.g. 20,22,26"
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args()

    device = torch.device(args.device)
    cuda = device.type == "cuda"
    repeats = args.repeats or (20 if cuda else 2)
    warmup = 3 if cuda else 1
    dtype = DTYPES[args.dtype]
    nonces = list(range(1000, 1000 + args.batch))
    shape = (args.batch, args.seq_len, args.hidden)
    normals = args.batch * args.seq_len * args.hidden
    torch.manual_seed(0)

    reference = {s: torch.empty(shape, dtype=dtype, device=device) for s in (False, True)}
    variants: list[tuple[str, bool, Callable[[torch.Tensor], None]]] = [
        ("spec per-nonce (reference)", False, lambda o: spec_batch(o, nonces, False))
    ]
    backends = ["cuda_fused", "torch"] if cuda else ["torch"]
    for backend in backends:
        variants.append(
            (f"generate_inputs {backend}", False, lambda o, b=backend: generate_inputs(o, BH, PK, nonces, backend=b))
        )
    for backend in backends:
        for log2 in [int(t) for t in args.tiles.split(",") if t]:
            variants.append(
                (
                    f"generate_inputs {backend} tile 2^{log2}",
                    False,
                    lambda o, b=backend, t=1 << log2: generate_inputs(o, BH, PK, nonces, backend=b, tile_elements=t),
                )
            )
    variants.append(("spec per-nonce, stronger RNG", True, lambda o: spec_batch(o, nonces, True)))
    variants.append(
        (
            f"generate_inputs {backends[0]}, stronger RNG",
            True,
            lambda o, b=backends[0]: generate_inputs(o, BH, PK, nonces, stronger_rng=True, backend=b),
        )
    )

    rows = []
    for name, stronger, fill in variants:
        out = (
            reference[stronger]
            if name.startswith("spec")
            else torch.full(shape, float("nan"), dtype=dtype, device=device)
        )
        fill(out)  # first call: compiles the fused kernel, and gives the output to compare
        if cuda:
            torch.cuda.synchronize(device)
        equal = True if name.startswith("spec") else bool(torch.equal(out, reference[stronger]))
        median, samples = timed(lambda f=fill, o=out: f(o), device, repeats, warmup)
        mib = peak_extra_mib(lambda f=fill, o=out: f(o), device)
        rows.append(
            {
                "variant": name,
                "median_ms": median,
                "min_ms": min(samples),
                "gnormals_per_s": normals / median / 1e6,
                "bitwise_equal_to_spec": equal,
                "peak_extra_mib": mib,
            }
        )
        print(f"{name:46s} {median:10.2f} ms  equal={equal}", flush=True)

    ref_ms = {
        False: rows[0]["median_ms"],
        True: next(r["median_ms"] for r in rows if r["variant"].startswith("spec per-nonce, stronger")),
    }
    name = torch.cuda.get_device_name(device) if cuda else f"CPU ({torch.get_num_threads()} threads)"
    print(
        f"\nPoC inputs: {args.batch} nonces x {args.seq_len} x {args.hidden} {args.dtype} on {name}, torch {torch.__version__}, "
        f"median of {repeats}"
    )
    print(
        f"| {'variant':46s} | {'median ms':>10s} | {'G normals/s':>11s} | {'speed-up':>8s} | {'peak extra MiB':>14s} | bitwise = spec |"
    )
    print(f"|{'-' * 48}|{'-' * 12}|{'-' * 13}|{'-' * 10}|{'-' * 16}|----------------|")
    for r in rows:
        speedup = ref_ms["stronger" in r["variant"]] / r["median_ms"]
        mib = "n/a" if r["peak_extra_mib"] is None else f"{r['peak_extra_mib']:.1f}"
        print(
            f"| {r['variant']:46s} | {r['median_ms']:10.2f} | {r['gnormals_per_s']:11.2f} | {speedup:7.1f}x | {mib:>14s} | "
            f"{'yes' if r['bitwise_equal_to_spec'] else 'NO':>14s} |"
        )
    # Floor for orientation: the output must be written once whatever the generator does.
    floor_out = torch.empty(shape, dtype=dtype, device=device)
    floor_ms, _ = timed(lambda: floor_out.fill_(1.0), device, repeats, warmup)
    print(
        f"floor: writing the {floor_out.numel() * floor_out.element_size() / 2**20:.0f} MiB batch once (fill_) "
        f"takes {floor_ms:.3f} ms"
    )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "device": name,
                    "torch": torch.__version__,
                    "shape": shape,
                    "dtype": args.dtype,
                    "repeats": repeats,
                    "rows": rows,
                    "write_floor_ms": floor_ms,
                },
                indent=1,
            )
        )
    if not all(r["bitwise_equal_to_spec"] for r in rows):
        raise SystemExit("an output differs from the spec formulation")


if __name__ == "__main__":
    main()
