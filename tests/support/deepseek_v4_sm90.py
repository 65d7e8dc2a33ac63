"""vLLM 0.25.1's sm90 (H200) numerics of DeepSeek-V4, laid over transformers' DeepseekV4 model.

The weights are the same either way (block_formats.py dequantizes them exactly). What vLLM does on sm90 that a bf16
forward does not, and this module adds, every choice in one place:

* FP8 linears quantize their input per token in groups of 128 to e4m3 with power-of-two scales: vLLM's block-FP8
  linear runs DeepGEMM's fp8_gemm_nt on `per_token_group_quant_fp8(x, 128, use_ue8m0=is_deep_gemm_e8m0_used())`
  (model_executor/layers/quantization/utils/fp8_utils.py:566, eps 1e-10; VLLM_USE_DEEP_GEMM_E8M0 defaults to 1,
  envs.py:183). Those linears: the fused wq_a+wkv (one quantized input, the same as quantizing it for each),
  wq_b, wo_b, the indexer's wq_b, the shared expert (FP8 in the checkpoint).
* wo_a: vLLM quantizes the attention output (after the inverse rotary) per head in groups of 128 with power-of-two
  scales, eps 1e-10, and runs DeepGEMM's fp8_einsum (models/deepseek_v4/common/ops/fused_inv_rope_fp8_quant.py:110,
  nvidia/ops/o_proj.py).
* Unquantized, as vLLM builds them without a quantization config: the compressors' wkv/wgate
  (compressor.py:226), the indexer's weights_proj (attention.py:707), the router.
* The router's logits in float32: GateLinear(out_dtype=float32) on sm90 at these sizes is cuBLAS bf16 x bf16 with
  float32 output (model_executor/layers/fused_moe/router/gate_linear.py:141), where transformers rounds the logits
  to bf16; scores, top-k and expert weights then stay float32 (a bf16 router would pick other experts on near ties).
  The routed MXFP4 experts run on Marlin on sm90 (fused_moe/oracle/mxfp4.py:327: W4A16, bf16 activations), so their
  inputs stay bf16 too.
* K/V (K = V in V4) as the fp8_ds_mla cache holds them, for the sliding window and the compressed entries alike:
  the first 448 (non-rotary) dimensions in e4m3 with one power-of-two scale per 64, amax floored at 1e-4, the last 64
  (rotary) in bf16 (models/deepseek_v4/common/ops/cache_utils.py:95-142).

Not emulated: the indexer's FP8 keys and queries (at PoC's seq_len the top-512 selection keeps every compressed
entry), the mHC and attention kernels' own accumulation orders.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

ACTIVATION_GROUP = 128
ACTIVATION_EPS = 1e-10
KV_NOPE_DIM = 448
KV_GROUP = 64
KV_EPS = 1e-4
E4M3_MAX = 448.0
# Each rounding above by name. The FP8 inputs: module names (transformers' DeepseekV4, relative to a decoder layer)
# whose input vLLM quantizes to FP8.
FP8_INPUTS: dict[str, tuple[str, ...]] = {
    "FP8 input of the fused wq_a + wkv": ("self_attn.q_a_proj", "self_attn.kv_proj"),
    "FP8 input of wq_b": ("self_attn.q_b_proj",),
    "FP8 input of wo_a": ("self_attn.o_a_proj",),
    "FP8 input of wo_b": ("self_attn.o_b_proj",),
    "FP8 input of the indexer's wq_b": ("self_attn.compressor.indexer.q_b_proj",),
    "FP8 input of the shared expert": (
        "mlp.shared_experts.gate_proj",
        "mlp.shared_experts.up_proj",
        "mlp.shared_experts.down_proj",
    ),
}
FLOAT32_ROUTER = "router logits in float32"
FP8_DS_MLA_KV = "fp8_ds_mla K/V"
ROUNDINGS = (*FP8_INPUTS, FLOAT32_ROUTER, FP8_DS_MLA_KV)
SM90_ATTENTION = "deepseek_v4_sm90_fp8_ds_mla"


def round_through_e4m3(x: torch.Tensor, group: int, eps: float) -> torch.Tensor:
    """x quantized to e4m3 in groups of `group` along the last dimension with power-of-two scales, and back, in
    x's dtype: what the FP8 kernel sees of x."""
    groups = x.float().unflatten(-1, (-1, group))
    amax = groups.abs().amax(dim=-1, keepdim=True).clamp(min=eps)
    scale = torch.exp2(torch.ceil(torch.log2(amax / E4M3_MAX)))
    quantized = (groups / scale).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return (quantized.float() * scale).flatten(-2).to(x.dtype)


def round_through_fp8_ds_mla(kv: torch.Tensor) -> torch.Tensor:
    """[..., 512] K/V rows as the fp8_ds_mla cache stores them and the attention kernel reads them back."""
    nope, rope = kv[..., :KV_NOPE_DIM], kv[..., KV_NOPE_DIM:]
    return torch.cat([round_through_e4m3(nope, KV_GROUP, KV_EPS), rope], dim=-1)


def apply_sm90_numerics(model: nn.Module, leave_out: frozenset[str] = frozenset()) -> None:
    """Puts the choices above on a loaded transformers DeepseekV4ForCausalLM, for good (a reference is built for
    one numerics). `leave_out`: names from ROUNDINGS to skip, for an ablation (deepseek_v4_consensus.py)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface
    from transformers.models.deepseek_v4.modeling_deepseek_v4 import eager_attention_forward

    unknown = leave_out - set(ROUNDINGS)
    if unknown:
        raise ValueError(f"no sm90 rounding named {sorted(unknown)}; the names are {list(ROUNDINGS)}")
    suffixes = tuple(suffix for name, names in FP8_INPUTS.items() if name not in leave_out for suffix in names)
    for name, module in model.model.layers.named_modules():
        if suffixes and name.endswith(suffixes):
            module.register_forward_pre_hook(_fp8_input)
    if FLOAT32_ROUTER not in leave_out:
        for layer in model.model.layers:
            # bf16 weights and inputs widen to float32 exactly: the products are cuBLAS's, the sums float32.
            layer.mlp.gate.float().register_forward_pre_hook(_float32_input)
    if FP8_DS_MLA_KV not in leave_out:
        # V4's own eager attention (with the per-head sink), fed the cache's rounding of K/V, under eager's masks: an
        # attention name without a mask function of its own gets no mask at all (masking_utils.py, not causal).
        AttentionInterface.register(SM90_ATTENTION, _fp8_ds_mla_attention(eager_attention_forward))
        AttentionMaskInterface.register(SM90_ATTENTION, ALL_MASK_ATTENTION_FUNCTIONS["eager"])
        model.set_attn_implementation(SM90_ATTENTION)


def _fp8_input(module: nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...]:
    return (round_through_e4m3(args[0], ACTIVATION_GROUP, ACTIVATION_EPS), *args[1:])


def _float32_input(module: nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...]:
    return (args[0].float(), *args[1:])


def _fp8_ds_mla_attention(eager: Callable[..., Any]) -> Callable[..., Any]:
    def attention(
        module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, *args: Any, **kwargs: Any
    ) -> Any:
        # K is V in V4 (one latent row per token): one rounding serves both, as one cache row does in vLLM.
        kv = round_through_fp8_ds_mla(key)
        return eager(module, query, kv, kv, *args, **kwargs)

    return attention
