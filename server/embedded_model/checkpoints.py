"""The tensors of a released checkpoint's layout for an architecture variant: name -> (shape, dtype), from its config.

Written out per architecture rather than read off transformers' module tree: transformers renames and fuses some
tensors on load (MiniMax-M2's per-expert w1/w3 become one gate_up_proj), while the released checkpoints, which
vLLM loads, keep the original names. Both load this layout.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

# name -> (shape, dtype name: "bfloat16" or "float32")
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
        for expert in range(experts):
            expert_prefix = f"{prefix}.block_sparse_moe.experts.{expert}"
            tensors |= {
                f"{expert_prefix}.w1.weight": ((intermediate, hidden), "bfloat16"),
                f"{expert_prefix}.w3.weight": ((intermediate, hidden), "bfloat16"),
                f"{expert_prefix}.w2.weight": ((hidden, intermediate), "bfloat16"),
            }
    return tensors


CHECKPOINT_LAYOUTS: Mapping[str, Callable[[Mapping[str, Any]], Tensors]] = {"minimax_m2": minimax_m2_tensors}


def checkpoint_tensors(config: Mapping[str, Any]) -> Tensors:
    return CHECKPOINT_LAYOUTS[config["model_type"]](config)
