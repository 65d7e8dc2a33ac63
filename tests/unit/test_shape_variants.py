"""The shape variants: a released Qwen3's config.json beside the embedded model's tokenizer, and no weights (vLLM
serves them with `--load-format dummy` on GPU hosts)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from server.embedded_model import DEFAULT_VARIANT, VARIANTS, build_embedded_model
from server.embedded_model.variants import DEEPSEEK_V4_FLASH_SHAPE, QWEN3_8B_SHAPE, QWEN3_30B_A3B_SHAPE, ShapeVariant
from tests.support.server_process import REPO_ROOT

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")
# Each released model's config.json, the fields that make its shape (transformers' names).
EXPECTED_SHAPES = {
    QWEN3_8B_SHAPE.name: dict(
        architectures=["Qwen3ForCausalLM"],
        model_type="qwen3",
        hidden_size=4096,
        num_hidden_layers=36,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
        intermediate_size=12288,
        vocab_size=151936,
        torch_dtype="bfloat16",
        max_position_embeddings=40960,
    ),
    QWEN3_30B_A3B_SHAPE.name: dict(
        architectures=["Qwen3MoeForCausalLM"],
        model_type="qwen3_moe",
        hidden_size=2048,
        num_hidden_layers=48,
        num_attention_heads=32,
        num_key_value_heads=4,
        head_dim=128,
        num_experts=128,
        num_experts_per_tok=8,
        moe_intermediate_size=768,
        decoder_sparse_step=1,
        mlp_only_layers=[],
        vocab_size=151936,
        torch_dtype="bfloat16",
        max_position_embeddings=40960,
    ),
}
# The sizes the model cards state: Qwen3-8B 8.2B parameters, Qwen3-30B-A3B 30.5B.
BILLIONS_OF_PARAMETERS = {QWEN3_8B_SHAPE.name: 8.2, QWEN3_30B_A3B_SHAPE.name: 30.5}
SHAPES = [QWEN3_8B_SHAPE, QWEN3_30B_A3B_SHAPE]


@pytest.fixture(scope="module", params=SHAPES, ids=lambda variant: variant.name)
def built(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[ShapeVariant, Path]:
    variant = request.param
    return variant, build_embedded_model(tmp_path_factory.mktemp(variant.name) / "model", variant)


def test_the_shape_variants_are_listed_beside_the_embedded_ones() -> None:
    assert {variant.name for variant in SHAPES} <= set(VARIANTS)
    assert all(isinstance(VARIANTS[variant.name], ShapeVariant) for variant in SHAPES)


def test_the_config_has_the_released_models_shape(built: tuple[ShapeVariant, Path]) -> None:
    variant, model_dir = built
    config = json.loads((model_dir / "config.json").read_text())
    assert config.items() >= EXPECTED_SHAPES[variant.name].items()
    assert json.loads((model_dir / "generation_config.json").read_text())["eos_token_id"] == [151645, 151643]


def test_transformers_reads_the_shape_at_the_released_size(built: tuple[ShapeVariant, Path]) -> None:
    variant, model_dir = built
    config = AutoConfig.from_pretrained(str(model_dir))
    with torch.device("meta"):  # shapes only: no memory, no weights
        model = AutoModelForCausalLM.from_config(config)
    assert type(model).__name__ == EXPECTED_SHAPES[variant.name]["architectures"][0]
    parameters = sum(parameter.numel() for parameter in model.parameters())
    assert round(parameters / 1e9, 1) == BILLIONS_OF_PARAMETERS[variant.name], parameters


def test_no_weights_and_the_embedded_models_tokenizer(built: tuple[ShapeVariant, Path]) -> None:
    variant, model_dir = built
    files = {path.name for path in model_dir.iterdir()}
    assert not {name for name in files if name.endswith((".safetensors", ".bin", ".pt"))}, files
    tiny_dir = DEFAULT_VARIANT.directory
    if not (tiny_dir / "build_info.json").is_file():
        pytest.fail(f"the embedded model is not built at {tiny_dir}: run `make test` (it builds it)")
    for name in TOKENIZER_FILES:
        assert (model_dir / name).read_bytes() == (tiny_dir / name).read_bytes(), name
    info = json.loads((model_dir / "build_info.json").read_text())
    assert info["variant"] == variant.name and info["weight_seed"] is None
    assert set(info["files_sha256"]) == files - {"build_info.json"}


def test_the_command_line_builds_a_shape_variant(tmp_path: Path) -> None:
    out = tmp_path / "qwen3-8b"
    command = [sys.executable, "-m", "server.embedded_model", "--variant", QWEN3_8B_SHAPE.name, "--out", str(out)]
    subprocess.run(command, cwd=REPO_ROOT, check=True, capture_output=True, timeout=300)
    assert json.loads((out / "config.json").read_text())["hidden_size"] == 4096
    assert not list(out.glob("*.safetensors"))


def test_the_deepseek_v4_flash_shape_reads_as_vllm_reads_the_released_config(tmp_path: Path) -> None:
    """vLLM's own DeepseekV4Config (not transformers') reads the shape: the spec's numbers for DeepSeek-V4-Flash
    (poc-v2-models.md section 7.1), its first layers' kinds, and the checkpoint's quantization as vLLM dispatches it."""
    from vllm.transformers_utils.config import get_config

    model_dir = build_embedded_model(tmp_path / "model", DEEPSEEK_V4_FLASH_SHAPE)
    config = get_config(str(model_dir), trust_remote_code=False)
    assert type(config).__module__ == "vllm.transformers_utils.configs.deepseek_v4"
    assert (config.architectures, config.hidden_size, config.vocab_size) == (["DeepseekV4ForCausalLM"], 4096, 129280)
    assert (config.num_attention_heads, config.num_key_value_heads, config.head_dim) == (64, 1, 512)
    assert (config.n_routed_experts, config.n_shared_experts, config.num_experts_per_tok) == (256, 1, 6)
    assert (config.hc_mult, config.sliding_window, config.index_topk) == (4, 128, 512)
    # Two sliding-window layers, then one compressed at 4 (with the indexer) and one at 128; three hash-routed.
    assert (config.num_hidden_layers, config.compress_ratios, config.num_hash_layers) == (4, [0, 0, 4, 128], 3)
    assert config.rope_parameters["rope_type"] == "yarn" and config.expert_dtype == "fp4"
    assert config.quantization_config["weight_block_size"] == [128, 128]
    assert not list(model_dir.glob("*.safetensors"))
