"""The tensors of a released checkpoint's layout for an architecture variant: name -> (shape, dtype), from its config.

Written out per architecture rather than read off transformers' module tree: transformers renames and fuses some
tensors on load (MiniMax-M2's per-expert w1/w3 become one gate_up_proj), while the released checkpoints, which
vLLM loads, keep the original names. Both load this layout.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

# name -> (shape, storage): "bfloat16" or "float32" (the tensor as drawn), "fp8" (FP8 in 128 x 128 blocks with a
# `.scale` tensor beside it), "mxfp4" (MXFP4 with a `.scale` beside it) or "expert_ids" (a hash-routing table of
# distinct expert ids per row, int32); block_formats.py has the quantized formats.
Tensors = dict[str, tuple[tuple[int, ...], str]]


def minimax_m2_tensors(config: Mapping[str, Any]) -> Tensors:
    """MiniMaxAI/MiniMax-M2's safetensors names (the routing bias in float32, as released)."""
    hidden, vocab, experts = config["hidden_size"], config["vocab_size"], config["num_local_experts"]
    heads, kv_heads, head_dim = config["num_attention_heads"], config["num_key_value_heads"], config["head_dim"]
    intermediate = config["intermediate_size"]
    tensors: Tensors = {
        "model.embed_tokens.weight": ((vocab, hidden), "bfloat16"),
        "model.norm.weight": ((hidden,), "bfloat16"),
        "lm_head.weight": ((vocab, hidden), "bfloat16"),
    }
    for layer in range(config["num_hidden_layers"]):
        prefix = f"model.layers.{layer}"
        tensors |= {
            f"{prefix}.input_layernorm.weight": ((hidden,), "bfloat16"),
            f"{prefix}.post_attention_layernorm.weight": ((hidden,), "bfloat16"),
            f"{prefix}.self_attn.q_proj.weight": ((heads * head_dim, hidden), "bfloat16"),
            f"{prefix}.self_attn.k_proj.weight": ((kv_heads * head_dim, hidden), "bfloat16"),
            f"{prefix}.self_attn.v_proj.weight": ((kv_heads * head_dim, hidden), "bfloat16"),
            f"{prefix}.self_attn.o_proj.weight": ((hidden, heads * head_dim), "bfloat16"),
            # One RMSNorm over all heads' queries (keys), not per head.
            f"{prefix}.self_attn.q_norm.weight": ((heads * head_dim,), "bfloat16"),
            f"{prefix}.self_attn.k_norm.weight": ((kv_heads * head_dim,), "bfloat16"),
            f"{prefix}.block_sparse_moe.gate.weight": ((experts, hidden), "bfloat16"),
            f"{prefix}.block_sparse_moe.e_score_correction_bias": ((experts,), "float32"),
        }
        tensors |= _expert_tensors(f"{prefix}.block_sparse_moe.experts", experts, intermediate, hidden, "bfloat16")
    return tensors


def deepseek_v4_tensors(config: Mapping[str, Any]) -> Tensors:
    """deepseek-ai/DeepSeek-V4-Flash's safetensors names (no `model.` prefix: vLLM's _make_deepseek_v4_weights_mapper
    and transformers' conversion_mapping both rename from these). FP8 where the released checkpoint is (attention
    projections but the compressors', the indexer's query projection, the shared expert), bf16 where vLLM builds the
    layer without a quantization config (compressor wkv/wgate, indexer weights_proj, the router), float32 where vLLM's
    parameters are (hyper-connections, attention sink, compressor position bias, routing bias)."""
    hidden, vocab, hc = config["hidden_size"], config["vocab_size"], config["hc_mult"]
    heads, head_dim, q_rank = config["num_attention_heads"], config["head_dim"], config["q_lora_rank"]
    groups, o_rank = config["o_groups"], config["o_lora_rank"]
    experts, intermediate = config["n_routed_experts"], config["moe_intermediate_size"]
    mix = (2 + hc) * hc
    tensors: Tensors = {
        "embed.weight": ((vocab, hidden), "bfloat16"),
        "head.weight": ((vocab, hidden), "bfloat16"),
        "norm.weight": ((hidden,), "bfloat16"),
        "hc_head_fn": ((hc, hc * hidden), "float32"),
        "hc_head_base": ((hc,), "float32"),
        "hc_head_scale": ((1,), "float32"),
    }
    for layer, ratio in enumerate(config["compress_ratios"][: config["num_hidden_layers"]]):
        prefix = f"layers.{layer}"
        tensors |= {
            f"{prefix}.attn_norm.weight": ((hidden,), "bfloat16"),
            f"{prefix}.ffn_norm.weight": ((hidden,), "bfloat16"),
            f"{prefix}.attn.wq_a.weight": ((q_rank, hidden), "fp8"),
            f"{prefix}.attn.q_norm.weight": ((q_rank,), "bfloat16"),
            f"{prefix}.attn.wq_b.weight": ((heads * head_dim, q_rank), "fp8"),
            f"{prefix}.attn.wkv.weight": ((head_dim, hidden), "fp8"),
            f"{prefix}.attn.kv_norm.weight": ((head_dim,), "bfloat16"),
            f"{prefix}.attn.wo_a.weight": ((groups * o_rank, heads * head_dim // groups), "fp8"),
            f"{prefix}.attn.wo_b.weight": ((hidden, groups * o_rank), "fp8"),
            f"{prefix}.attn.attn_sink": ((heads,), "float32"),
            f"{prefix}.ffn.gate.weight": ((experts, hidden), "bfloat16"),
            f"{prefix}.ffn.shared_experts.w1.weight": ((intermediate, hidden), "fp8"),
            f"{prefix}.ffn.shared_experts.w3.weight": ((intermediate, hidden), "fp8"),
            f"{prefix}.ffn.shared_experts.w2.weight": ((hidden, intermediate), "fp8"),
        }
        for site in ("attn", "ffn"):
            tensors |= {
                f"{prefix}.hc_{site}_fn": ((mix, hc * hidden), "float32"),
                f"{prefix}.hc_{site}_base": ((mix,), "float32"),
                f"{prefix}.hc_{site}_scale": ((3,), "float32"),
            }
        if ratio:
            tensors |= _compressor_tensors(f"{prefix}.attn.compressor", ratio, head_dim, hidden)
        if ratio == 4:
            index_heads, index_dim = config["index_n_heads"], config["index_head_dim"]
            tensors |= {
                f"{prefix}.attn.indexer.wq_b.weight": ((index_heads * index_dim, q_rank), "fp8"),
                f"{prefix}.attn.indexer.weights_proj.weight": ((index_heads, hidden), "bfloat16"),
                **_compressor_tensors(f"{prefix}.attn.indexer.compressor", ratio, index_dim, hidden),
            }
        if layer < config["num_hash_layers"]:
            tensors[f"{prefix}.ffn.gate.tid2eid"] = ((vocab, config["num_experts_per_tok"]), "expert_ids")
        else:
            tensors[f"{prefix}.ffn.gate.bias"] = ((experts,), "float32")
        tensors |= _expert_tensors(f"{prefix}.ffn.experts", experts, intermediate, hidden, "mxfp4")
    return tensors


def _expert_tensors(prefix: str, experts: int, intermediate: int, hidden: int, storage: str) -> Tensors:
    """The released checkpoints' per-expert SwiGLU: w1 (gate) and w3 (up) to `intermediate`, w2 (down) back."""
    tensors: Tensors = {}
    for expert in range(experts):
        tensors |= {
            f"{prefix}.{expert}.w1.weight": ((intermediate, hidden), storage),
            f"{prefix}.{expert}.w3.weight": ((intermediate, hidden), storage),
            f"{prefix}.{expert}.w2.weight": ((hidden, intermediate), storage),
        }
    return tensors


def _compressor_tensors(prefix: str, ratio: int, head_dim: int, hidden: int) -> Tensors:
    # Ratio 4 compresses overlapping windows: twice the width (vLLM's compressor `coff`).
    width = (2 if ratio == 4 else 1) * head_dim
    return {
        f"{prefix}.wkv.weight": ((width, hidden), "bfloat16"),
        f"{prefix}.wgate.weight": ((width, hidden), "bfloat16"),
        f"{prefix}.ape": ((ratio, width), "float32"),
        f"{prefix}.norm.weight": ((head_dim,), "bfloat16"),
    }


CHECKPOINT_LAYOUTS: Mapping[str, Callable[[Mapping[str, Any]], Tensors]] = {
    "minimax_m2": minimax_m2_tensors,
    "deepseek_v4": deepseek_v4_tensors,
}


def checkpoint_tensors(config: Mapping[str, Any]) -> Tensors:
    return CHECKPOINT_LAYOUTS[config["model_type"]](config)
