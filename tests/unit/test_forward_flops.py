"""benchmarks/forward_flops.py's matmul count against transformers' own modules for the same config: every weight a
token passes through is 2 FLOPs per element, so the count's projection part must equal twice the parameters of
the layers' matrices (built on the meta device: shapes only)."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM

from benchmarks.forward_flops import causal_attention_flops, deepseek_v4_layer_flops, flops_per_token
from server.embedded_model import build_embedded_model
from server.embedded_model.variants import DEEPSEEK_V4_FLASH_SHAPE, QWEN3_8B_SHAPE

SEQ_LEN = 1024


def layer_matrices(model_dir: Path) -> dict[str, int]:
    """Parameter name inside a layer -> elements summed over the layers, norms and scalars left out."""
    config = AutoConfig.from_pretrained(str(model_dir))
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    sums: dict[str, int] = {}
    for name, parameter in model.named_parameters():
        if ".layers." in name and parameter.dim() >= 2:
            key = name.split(".layers.")[1].split(".", 1)[1]
            sums[key] = sums.get(key, 0) + parameter.numel()
    return sums


def test_qwen3_counts_twice_its_layer_weights_plus_causal_attention(tmp_path: Path) -> None:
    model_dir = build_embedded_model(tmp_path / "model", QWEN3_8B_SHAPE)
    config = json.loads((model_dir / "config.json").read_text())
    weights = sum(layer_matrices(model_dir).values())
    attention = config["num_hidden_layers"] * causal_attention_flops(32, 128, (SEQ_LEN + 1) / 2)
    assert flops_per_token(config, SEQ_LEN) == 2 * weights + attention


def test_deepseek_v4_counts_its_attention_side_matrices_as_transformers_builds_them(tmp_path: Path) -> None:
    """At one token (one key, no compressed entry yet) and with the experts and router taken out, what is left is the
    attention side's matrices (the low-rank query, the K/V head, the grouped output, the compressors, the indexer)
    and the hyper-connections' mixing."""
    model_dir = build_embedded_model(tmp_path / "model", DEEPSEEK_V4_FLASH_SHAPE)
    config = json.loads((model_dir / "config.json").read_text())
    layers = config["num_hidden_layers"]
    attention_side = sum(
        elements
        for name, elements in layer_matrices(model_dir).items()
        if not name.startswith("mlp.") and not name.endswith("position_bias")  # a bias added, not a matmul
    )
    no_experts = config | {"num_experts_per_tok": 0, "n_shared_experts": 0, "num_hash_layers": layers}
    counted = sum(deepseek_v4_layer_flops(no_experts, layer, 1) for layer in range(layers))
    one_key = layers * causal_attention_flops(config["num_attention_heads"], config["head_dim"], 1)
    hc, hidden = config["hc_mult"], config["hidden_size"]
    # Twice per layer, the mixing also collapses the hc streams into one and expands one back into hc.
    collapse_and_expand = layers * 2 * (2 * hc * hidden + 2 * hc * hidden * (hc + 1))
    assert counted == 2 * attention_side + one_key + collapse_and_expand
