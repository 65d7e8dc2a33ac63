"""The compiled PoC forward sees vLLM's norms as plain torch ops, which inductor fuses (seam `inlined_ir_ops`).

vLLM 0.20 routes its IR ops (vllm.ir: rms_norm) through an opaque torch custom op wherever its own inductor
pass is there to lower it (a GPU engine); the PoC forward is compiled by plain torch.compile, where that op stayed
opaque and ran unfused (100 ms of an 833 ms Qwen3-8B batch on an H200). The graph dynamo hands the compiler is
read here directly, on vLLM's own RMSNorm layer.
"""

from __future__ import annotations

import contextlib

import pytest
import torch
from vllm.config import VllmConfig, set_current_vllm_config
from vllm.model_executor.layers.layernorm import RMSNorm

from engine_ext.seams import seams_for_installed_vllm

HIDDEN = 64


def traced_calls(norm: RMSNorm, context: contextlib.AbstractContextManager[None]) -> list[str]:
    """The functions in the graph dynamo traces from one call of the norm without a residual: Qwen3's query and
    key norms and the first layer's input norm (72 of the 73 norms of a Qwen3-8B forward are these)."""
    seen: list[str] = []

    def recording_backend(graph_module: torch.fx.GraphModule, _inputs: list[torch.Tensor]):
        seen.extend(str(node.target) for node in graph_module.graph.nodes if node.op == "call_function")
        return graph_module

    torch._dynamo.reset()

    def forward(x: torch.Tensor) -> torch.Tensor:  # a function calling the module, as a model's forward does
        return norm(x)

    compiled = torch.compile(forward, backend=recording_backend)
    with context, torch.inference_mode():
        compiled(torch.randn(4, HIDDEN))
    return seen


@pytest.fixture(scope="module")
def norm() -> RMSNorm:
    with set_current_vllm_config(VllmConfig()):
        return RMSNorm(HIDDEN)


def test_the_norm_is_traced_as_plain_torch_ops(norm: RMSNorm) -> None:
    calls = traced_calls(norm, seams_for_installed_vllm().inlined_ir_ops())
    assert not [call for call in calls if "vllm_ir" in call], calls
    assert any("rsqrt" in call for call in calls), calls


def test_without_the_seam_vllm_0_20_hides_the_norm_in_an_opaque_op(norm: RMSNorm) -> None:
    ir = pytest.importorskip("vllm.ir", reason="vLLM 0.15 has no IR ops: nothing is hidden there")
    calls = traced_calls(norm, ir.enable_torch_wrap(True))
    assert "vllm_ir.rms_norm.default" in calls, calls
