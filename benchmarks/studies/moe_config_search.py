"""vLLM's Triton fused-MoE kernel at the PoC's token count, under candidate tile configs (GPU only).

A PoC batch of 32 x 1024 tokens makes each MoE layer one fused_experts call over 32,768 tokens. vLLM takes the
kernel's tile config from a file tuned per device and expert shape (for the H200 and 128 experts of width 768 it
ships one), keyed by token counts up to 4096, so the PoC's count gets the largest key's config. This times that
default and a grid of alternatives on random bf16 inputs with uniform random routing (the Qwen3-30B-A3B expert shape
by default), each as the mean of --iterations calls after an untimed one, in a grid order that starts next to the
default; --seconds caps the search. Each time covers the whole call (routing alignment, both expert GEMMs, the
activation and the top-k sum); TFLOP/s counts the two expert GEMMs only. Prints every config, writes them to --json
as it goes, and ends with the fastest. Asserts nothing.

With --fused-swiglu it times, beside vLLM's call at its own config, the routed experts of the compiled PoC forward
(engine_ext.seams.fused_moe_swiglu: the activation inside the gate/up kernel, vLLM's down projection and sum) under
a grid of tiles for the fused kernel, with the default tile first, and prints how far each one's output lies from
vLLM's (largest absolute difference, and the relative L2 of the whole output); before that, the top-k sum alone:
vLLM's (ops.moe_sum) and the forward's Triton one on the same routed outputs. With --down-projection it times the
same routed experts under a grid of tiles for the down projection alone (its block height stays vLLM's), vLLM's own
config first. Usage, on a GPU host with vLLM installed (docs/gpu.md):

    python3 benchmarks/studies/moe_config_search.py --json moe-configs.json
    python3 benchmarks/studies/moe_config_search.py --fused-swiglu --json moe-swiglu.json
    python3 benchmarks/studies/moe_config_search.py --down-projection --json moe-down.json
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from engine_ext.seams.expert_kernels import GateUpTile, topk_sum
from engine_ext.seams.fused_moe_swiglu import DEFAULT_TILE, routed_experts_swiglu

# The grid: the default's own values first in each axis, so the search starts next to it.
BLOCK_M = (128, 64, 256)
BLOCK_N = (256, 128)
BLOCK_K = (64, 128)
GROUP_M = (16, 32, 1)
WARPS = (8, 4)
STAGES = (4, 3, 5)
# The fused gate/up kernel's grid (its block height is vLLM's, which aligns the routed tokens).
SWIGLU_BLOCK_N = (128, 64)
SWIGLU_BLOCK_K = (64, 128, 32)
SWIGLU_WARPS = (8, 4)
SWIGLU_STAGES = (4, 3, 2, 5)
SWIGLU_GROUP_M = (16, 1, 32, 64)


@dataclass(frozen=True)
class ExpertShape:
    tokens: int
    experts: int
    hidden: int
    width: int
    top_k: int

    def gemm_flops(self) -> int:
        # Per routed token: the gate and up projections (hidden -> 2 x width), then down (width -> hidden).
        return 2 * self.tokens * self.top_k * (2 * self.width * self.hidden + self.hidden * self.width)


class ExpertCall:
    """One fused_experts call on fixed random inputs."""

    def __init__(self, shape: ExpertShape) -> None:
        torch.manual_seed(0)
        cuda = {"dtype": torch.bfloat16, "device": "cuda"}
        self.hidden_states = torch.randn(shape.tokens, shape.hidden, **cuda) * 0.1
        self.w1 = torch.randn(shape.experts, 2 * shape.width, shape.hidden, **cuda) * 0.02
        self.w2 = torch.randn(shape.experts, shape.hidden, shape.width, **cuda) * 0.02
        weights, ids = torch.softmax(torch.randn(shape.tokens, shape.experts, device="cuda"), -1).topk(shape.top_k)
        self.topk_ids = ids.to(torch.int32)
        self.topk_weights = (weights / weights.sum(-1, keepdim=True)).float()
        self.output = torch.empty_like(self.hidden_states)

    def __call__(self) -> None:
        from vllm.model_executor.layers.fused_moe.fused_moe import fused_experts

        self.output = fused_experts(self.hidden_states, self.w1, self.w2, self.topk_weights, self.topk_ids)


class SwigluExpertCall(ExpertCall):
    """The compiled PoC forward's routed experts on the same inputs, with the fused kernel's tile settable."""

    def __init__(self, shape: ExpertShape) -> None:
        super().__init__(shape)
        self.tile = DEFAULT_TILE
        self.down_tile: dict[str, int] = {}  # vLLM's config

    def __call__(self) -> None:
        routed_experts_swiglu(
            self.output,
            self.hidden_states,
            self.w1,
            self.w2,
            self.topk_weights,
            self.topk_ids,
            self.w1.shape[0],
            None,
            self.tile,
            down_tile=self.down_tile,
        )


def default_config(shape: ExpertShape) -> dict[str, int]:
    from vllm.model_executor.layers.fused_moe.fused_moe import try_get_optimal_moe_config

    w1_shape = (shape.experts, 2 * shape.width, shape.hidden)
    w2_shape = (shape.experts, shape.hidden, shape.width)
    return try_get_optimal_moe_config(w1_shape, w2_shape, shape.top_k, None, shape.tokens)


def milliseconds_per_call(call: Callable[[], None], config: dict[str, int] | None, iterations: int) -> float:
    from vllm.model_executor.layers.fused_moe import override_config

    with override_config(config) if config else contextlib.nullcontext():
        call()  # compiles the kernel for this config
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iterations):
            call()
        end.record()
        torch.cuda.synchronize()
    return start.elapsed_time(end) / iterations


def swiglu_candidates() -> Iterator[GateUpTile]:
    # The group size varies slowest: the tile shapes are tried at the default's first.
    for group_m, block_n, block_k, warps, stages in itertools.product(
        SWIGLU_GROUP_M, SWIGLU_BLOCK_N, SWIGLU_BLOCK_K, SWIGLU_WARPS, SWIGLU_STAGES
    ):
        tile = GateUpTile(block_n, block_k, group_m, warps, stages)
        if tile != DEFAULT_TILE:
            yield tile


def down_candidates(default: dict[str, int]) -> Iterator[dict[str, int]]:
    # BLOCK_M is left out: the alignment fixes it. The group size varies slowest.
    for group_m, block_n, block_k, warps, stages in itertools.product(
        GROUP_M, BLOCK_N + (64,), BLOCK_K + (32,), WARPS, STAGES + (2,)
    ):
        tile = {
            "BLOCK_SIZE_N": block_n,
            "BLOCK_SIZE_K": block_k,
            "GROUP_SIZE_M": group_m,
            "num_warps": warps,
            "num_stages": stages,
        }
        if {**default, **tile} != default:
            yield tile


def swiglu_milliseconds(call: SwigluExpertCall, tile: GateUpTile | dict[str, int], iterations: int) -> float:
    if isinstance(tile, GateUpTile):
        call.tile = tile
    else:
        call.down_tile = tile
    return milliseconds_per_call(call, None, iterations)


def sum_milliseconds(shape: ExpertShape, iterations: int) -> dict[str, float]:
    """vLLM's top-k sum and the Triton one over the same [tokens, top_k, hidden] routed outputs."""
    from vllm import _custom_ops as ops

    routed = torch.randn(shape.tokens, shape.top_k, shape.hidden, dtype=torch.bfloat16, device="cuda")
    vllm_out, triton_out = (
        torch.empty(shape.tokens, shape.hidden, dtype=torch.bfloat16, device="cuda") for _ in range(2)
    )
    figures = {
        "vllm_ms": milliseconds_per_call(lambda: ops.moe_sum(routed, vllm_out), None, iterations),
        "triton_ms": milliseconds_per_call(lambda: topk_sum(routed, triton_out), None, iterations),
    }
    return {**figures, **distance(triton_out, routed.float().sum(1))}


def distance(output: torch.Tensor, reference: torch.Tensor) -> dict[str, float]:
    difference = output.float() - reference.float()
    return {
        "max_abs": difference.abs().max().item(),
        "relative_l2": (difference.norm() / reference.float().norm()).item(),
    }


def candidates(default: dict[str, int]) -> Iterator[dict[str, int]]:
    for block_m, block_n, block_k, group_m, warps, stages in itertools.product(
        BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, WARPS, STAGES
    ):
        config = {
            "BLOCK_SIZE_M": block_m,
            "BLOCK_SIZE_N": block_n,
            "BLOCK_SIZE_K": block_k,
            "GROUP_SIZE_M": group_m,
            "num_warps": warps,
            "num_stages": stages,
        }
        if config != default:
            yield config


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=32 * 1024, help="tokens per call (a PoC batch: batch x seq_len)")
    parser.add_argument("--experts", type=int, default=128)
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--width", type=int, default=768, help="each expert's intermediate size")
    parser.add_argument("--top-k", type=int, default=8)
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=140.0, help="stop trying candidates after this long")
    parser.add_argument("--json", type=Path, help="also write the figures here, rewritten after each config")
    parser.add_argument(
        "--fused-swiglu", action="store_true", help="time the PoC forward's experts (activation fused) under tiles"
    )
    parser.add_argument("--down-projection", action="store_true", help="the same, under tiles for the down projection")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("moe_config_search: needs a CUDA GPU (vLLM's fused-MoE kernel is a Triton GPU kernel)", file=sys.stderr)
        return 2
    started = time.monotonic()
    shape = ExpertShape(args.tokens, args.experts, args.hidden, args.width, args.top_k)
    call = ExpertCall(shape)
    default = default_config(shape)
    print(f"vLLM's config for {shape}: {default}", flush=True)
    if args.fused_swiglu or args.down_projection:
        return search_swiglu_tiles(shape, call, default, args, started)

    def time_config(config: dict[str, int] | None) -> tuple[dict[str, Any], str]:
        ms = milliseconds_per_call(call, config, args.iterations)
        tflops = shape.gemm_flops() / ms / 1e9
        return {
            "config": config or default,
            "ms": ms,
            "tflops": tflops,
        }, f"{config or default}: {ms:.3f} ms, {tflops:.0f} TFLOP/s"

    def write(timed: list[dict[str, Any]]) -> None:
        if args.json:
            args.json.write_text(json.dumps({"shape": asdict(shape), "default": default, "results": timed}, indent=1))

    grid = itertools.chain([("default", None)], (("candidate", c) for c in candidates(default)))
    timed = timed_grid(grid, time_config, started + args.seconds, write)
    if not timed:
        return 1
    fastest = min(timed, key=lambda entry: entry["ms"])
    print(f"fastest of {len(timed)}: {fastest['name']} {fastest['config']} {fastest['ms']:.3f} ms", flush=True)
    return 0


def timed_grid(
    grid: Iterable[tuple[str, Any]],
    time_one: Callable[[Any], tuple[dict[str, Any], str]],
    deadline: float,
    write: Callable[[list[dict[str, Any]]], None],
) -> list[dict[str, Any]]:
    """Times each (name, candidate) of the grid until the deadline (the first, the default, always), printing a
    line each and handing the figures so far to write after each."""
    timed: list[dict[str, Any]] = []
    for name, candidate in grid:
        if name != "default" and time.monotonic() > deadline:
            print("--seconds reached", flush=True)
            break
        try:
            entry, line = time_one(candidate)
        except Exception as error:  # a tile too large for shared memory fails to compile; the rest go on
            print(f"{name} {candidate}: failed: {str(error)[:120]}", flush=True)
            continue
        timed.append({"name": name, **entry})
        print(f"{name} {line}", flush=True)
        write(timed)
    if not timed:
        print("nothing ran", file=sys.stderr)
    return timed


def search_swiglu_tiles(
    shape: ExpertShape, vllm_call: ExpertCall, default: dict[str, int], args: argparse.Namespace, started: float
) -> int:
    vllm_ms = milliseconds_per_call(vllm_call, None, args.iterations)
    reference = vllm_call.output.clone()
    print(
        f"vLLM's experts at its config: {vllm_ms:.3f} ms, {shape.gemm_flops() / vllm_ms / 1e9:.0f} TFLOP/s", flush=True
    )
    sums = sum_milliseconds(shape, args.iterations)
    print(
        f"top-k sum: vLLM's {sums['vllm_ms']:.3f} ms, Triton {sums['triton_ms']:.3f} ms "
        f"(max |diff| {sums['max_abs']:.3g})",
        flush=True,
    )
    call = SwigluExpertCall(shape)

    def time_tile(tile: GateUpTile | dict[str, int]) -> tuple[dict[str, Any], str]:
        ms = swiglu_milliseconds(call, tile, args.iterations)
        entry = {
            "tile": asdict(tile) if isinstance(tile, GateUpTile) else tile,
            "ms": ms,
            "ratio_to_vllm": vllm_ms / ms,
            **distance(call.output, reference),
        }
        return entry, (
            f"{tile}: {ms:.3f} ms ({entry['ratio_to_vllm']:.3f}x vLLM's), max |diff| {entry['max_abs']:.3g}, "
            f"relative L2 {entry['relative_l2']:.3g}"
        )

    def write(timed: list[dict[str, Any]]) -> None:
        if args.json:
            args.json.write_text(
                json.dumps(
                    {
                        "shape": asdict(shape),
                        "vllm_config": default,
                        "vllm_ms": vllm_ms,
                        "topk_sum": sums,
                        "results": timed,
                    },
                    indent=1,
                )
            )

    grid: Iterator[tuple[str, GateUpTile | dict[str, int]]] = (
        itertools.chain([("default", {})], (("candidate", t) for t in down_candidates(default)))
        if args.down_projection
        else itertools.chain([("default", DEFAULT_TILE)], (("candidate", t) for t in swiglu_candidates()))
    )
    timed = timed_grid(grid, time_tile, started + args.seconds, write)
    if not timed:
        return 1
    fastest = min(timed, key=lambda entry: entry["ms"])
    print(
        f"fastest of {len(timed)}: {fastest['name']} {fastest['tile']} {fastest['ms']:.3f} ms "
        f"({fastest['ratio_to_vllm']:.3f}x vLLM's {vllm_ms:.3f} ms)",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
