"""Model FLOPs of the PoC forward per token, and the utilisation a measured forward time reaches.

The PoC forward runs the decoder's layers over B sequences of S tokens and stops at the last hidden state (the
12-dim head on the last token is negligible): this counts each layer's matmul work from the model's config.json,
2 FLOPs per multiply-add, causal attention over the keys each position sees. Counted per architecture:

- qwen3, minimax_m2: q/k/v/o projections, attention over (S + 1) / 2 keys on average, the MLP (Qwen3) or the
  router plus top-k experts (MiniMax-M2).
- deepseek_v4: the low-rank query (wq_a, wq_b), the one shared K/V head (wkv), the grouped output (wo_a, wo_b),
  attention over the sliding window plus the compressed entries a position sees (top index_topk of them where the
  indexer selects, compress ratio 4), the compressors (twice as wide at ratio 4), the indexer's query, weights and
  scores, the hyper-connections' mixing (hc_mult streams, twice per layer), the router (not on hash-routed layers)
  and the routed plus shared experts.

Normalisations, rotary, activations and softmax are left out (elementwise, not matmul work). The utilisation is the
counted FLOPs over the forward's time against a peak the caller measured (benchmarks/gpu_peak.py).

Usage: `python3 benchmarks/forward_flops.py --model .build/models/deepseek-v4-flash-shape-4-layers --seq-len 1024
--batch 16 --forward-ms 132.1 --peak-tflops 786 1466`
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any


def causal_attention_flops(heads: int, head_dim: int, average_keys: float) -> float:
    # Scores (q . k) and the weighted sum of values, each heads x head_dim multiply-adds per key.
    return 2 * 2 * heads * head_dim * average_keys


def grouped_query_layer_flops(config: Mapping[str, Any], seq_len: int) -> float:
    hidden, heads, kv_heads = config["hidden_size"], config["num_attention_heads"], config["num_key_value_heads"]
    head_dim = config.get("head_dim") or hidden // heads
    projections = 2 * hidden * (heads + 2 * kv_heads) * head_dim + 2 * heads * head_dim * hidden
    return projections + causal_attention_flops(heads, head_dim, (seq_len + 1) / 2)


def qwen3_flops(config: Mapping[str, Any], seq_len: int) -> float:
    mlp = 2 * 3 * config["hidden_size"] * config["intermediate_size"]
    return config["num_hidden_layers"] * (grouped_query_layer_flops(config, seq_len) + mlp)


def minimax_m2_flops(config: Mapping[str, Any], seq_len: int) -> float:
    hidden = config["hidden_size"]
    router = 2 * hidden * config["num_local_experts"]
    experts = config["num_experts_per_tok"] * 2 * 3 * hidden * config["intermediate_size"]
    return config["num_hidden_layers"] * (grouped_query_layer_flops(config, seq_len) + router + experts)


def average_over_positions(seq_len: int, keys_at: Callable[[int], float]) -> float:
    return sum(keys_at(position) for position in range(seq_len)) / seq_len


def deepseek_v4_layer_flops(config: Mapping[str, Any], layer: int, seq_len: int) -> float:
    hidden, heads, head_dim = config["hidden_size"], config["num_attention_heads"], config["head_dim"]
    q_rank, o_rank, o_groups = config["q_lora_rank"], config["o_lora_rank"], config["o_groups"]
    ratio = config["compress_ratios"][layer]
    window, top_k = config["sliding_window"], config["index_topk"]
    index_heads, index_dim = config["index_n_heads"], config["index_head_dim"]
    hc = config["hc_mult"]

    flops = 2 * hidden * q_rank + 2 * q_rank * heads * head_dim  # wq_a, wq_b
    flops += 2 * hidden * head_dim  # wkv: one K/V head shared by all query heads
    flops += 2 * heads * head_dim * o_rank + 2 * o_groups * o_rank * hidden  # wo_a (per group), wo_b

    def compressed_seen(position: int) -> int:
        return (position + 1) // ratio if ratio else 0

    def keys_at(position: int) -> float:
        compressed = compressed_seen(position)
        if ratio == 4:  # the indexer keeps the top index_topk compressed entries
            compressed = min(compressed, top_k)
        return min(window, position + 1) + compressed

    flops += causal_attention_flops(heads, head_dim, average_over_positions(seq_len, keys_at))
    if ratio:
        width = 2 if ratio == 4 else 1  # ratio 4 compresses overlapping windows: twice the width
        flops += 2 * 2 * hidden * head_dim * width  # the compressor's wkv and wgate
    if ratio == 4:
        flops += 2 * q_rank * index_heads * index_dim + 2 * hidden * index_heads  # indexer wq_b, weights_proj
        flops += 2 * 2 * hidden * index_dim * 2  # the indexer's own compressor, ratio 4
        flops += 2 * index_heads * index_dim * average_over_positions(seq_len, compressed_seen)  # its scores

    # Hyper-connections, before attention and before the MoE: the mixing weights from the hc x hidden streams
    # (hc pre, hc post, hc x hc residual), the pre-collapse to one stream and the post-expansion back.
    flops += 2 * (2 * hc * hidden * (2 * hc + hc * hc) + 2 * hc * hidden + 2 * hc * hidden * (hc + 1))

    experts = config["num_experts_per_tok"] + config["n_shared_experts"]
    flops += experts * 2 * 3 * hidden * config["moe_intermediate_size"]
    if layer >= config["num_hash_layers"]:  # hash-routed layers look their experts up by token id
        flops += 2 * hidden * config["n_routed_experts"]
    return flops


def deepseek_v4_flops(config: Mapping[str, Any], seq_len: int) -> float:
    return sum(deepseek_v4_layer_flops(config, layer, seq_len) for layer in range(config["num_hidden_layers"]))


FLOPS_PER_TOKEN = {"qwen3": qwen3_flops, "minimax_m2": minimax_m2_flops, "deepseek_v4": deepseek_v4_flops}


def flops_per_token(config: Mapping[str, Any], seq_len: int) -> float:
    model_type = config["model_type"]
    if model_type not in FLOPS_PER_TOKEN:
        raise SystemExit(f"no FLOP count for model_type {model_type!r} (known: {', '.join(FLOPS_PER_TOKEN)})")
    return FLOPS_PER_TOKEN[model_type](config, seq_len)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, required=True, help="a model directory (its config.json)")
    parser.add_argument("--seq-len", type=int, required=True)
    parser.add_argument("--batch", type=int, required=True)
    parser.add_argument("--forward-ms", type=float, help="a measured forward's time per batch (poc_bench.py)")
    parser.add_argument("--peak-tflops", type=float, nargs="*", default=[], help="measured peaks (gpu_peak.py)")
    args = parser.parse_args()
    config = json.loads((args.model / "config.json").read_text())
    per_token = flops_per_token(config, args.seq_len)
    per_batch = per_token * args.seq_len * args.batch
    print(
        f"{args.model.name} ({config['model_type']}, {config['num_hidden_layers']} layers), "
        f"{args.seq_len} x {args.batch}: {per_token / 1e9:.3f} GFLOP per token, {per_batch / 1e12:.2f} TFLOP per batch"
    )
    if args.forward_ms:
        achieved = per_batch / (args.forward_ms / 1000) / 1e12
        shares = ", ".join(f"{achieved / peak:.1%} of {peak:g}" for peak in args.peak_tflops)
        print(f"  forward {args.forward_ms} ms per batch: {achieved:.0f} TFLOP/s" + (f" ({shares})" if shares else ""))


if __name__ == "__main__":
    main()
