"""The compiled PoC forward's routed experts (engine_ext.seams.fused_moe_swiglu: the activation inside the gate/up
kernel) against vLLM's own Triton experts on the same bf16 inputs. The two differ by where silu(gate) * up is
rounded (from fp32 accumulators here, from bf16 gate and up in vLLM), so they agree to bf16 precision, not bit for
bit. Kernel-level only: no server."""

from __future__ import annotations

import pytest
import torch

from engine_ext.seams.fused_moe_swiglu import DEFAULT_TILE, routed_experts_swiglu

if not torch.cuda.is_available():
    pytest.skip("the Triton experts run on a CUDA GPU only", allow_module_level=True)

# (tokens, experts, hidden, width, top_k): a PoC-sized call at the Qwen3-30B-A3B expert shape, and a small ragged
# one (tokens that leave most experts' groups padded, a width that is not a multiple of the tile).
SHAPES = [(32768, 128, 2048, 768, 8), (333, 16, 512, 200, 4)]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda shape: "x".join(map(str, shape)))
def test_routed_experts_match_vllms_triton_experts(shape: tuple[int, int, int, int, int]) -> None:
    from vllm.model_executor.layers.fused_moe.fused_moe import fused_experts

    tokens, experts, hidden, width, top_k = shape
    torch.manual_seed(0)
    cuda = {"dtype": torch.bfloat16, "device": "cuda"}
    x = torch.randn(tokens, hidden, **cuda) * 0.5
    w1 = torch.randn(experts, 2 * width, hidden, **cuda) * hidden**-0.5
    w2 = torch.randn(experts, hidden, width, **cuda) * width**-0.5
    weights, ids = torch.softmax(torch.randn(tokens, experts, device="cuda"), -1).topk(top_k)
    topk_ids, topk_weights = ids.to(torch.int32), (weights / weights.sum(-1, keepdim=True)).float()

    expected = fused_experts(x, w1, w2, topk_weights, topk_ids).float()
    output = torch.full_like(x, float("nan"))
    routed_experts_swiglu(output, x, w1, w2, topk_weights, topk_ids, experts, None, DEFAULT_TILE)

    assert torch.isfinite(output).all()
    relative_l2 = ((output.float() - expected).norm() / expected.norm()).item()
    # bf16 keeps 8 significant bits: one rounding of the activation's operands moves the result by about 2^-9.
    assert relative_l2 < 1e-2, relative_l2
