"""The embedded default model is built offline, with the real Qwen tokenizer, byte-identically each time."""

from __future__ import annotations

import json
from pathlib import Path

from transformers import AutoTokenizer

from server.embedded_model.builder import build_embedded_model


def test_two_builds_are_byte_identical_and_match_the_installed_one(tmp_path: Path, model_dir: Path) -> None:
    first = json.loads((build_embedded_model(tmp_path / "a") / "build_info.json").read_text())
    second = json.loads((build_embedded_model(tmp_path / "b") / "build_info.json").read_text())
    assert first == second
    assert first == json.loads((model_dir / "build_info.json").read_text())
    assert set(first["files_sha256"]) >= {"model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json"}


def test_the_tokenizer_is_qwens(model_dir: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    assert tokenizer.encode("Hello world, this is a test") == [9707, 1879, 11, 419, 374, 264, 1273]
    assert [tokenizer.convert_tokens_to_ids(t) for t in ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "</think>")] == [151643, 151644, 151645, 151668]
    assert tokenizer.eos_token_id == 151645
    # Digits split one by one, as Qwen's pre-tokenizer does.
    assert len(tokenizer.encode("12345")) == 5


def test_the_config_is_a_small_qwen3(model_dir: Path) -> None:
    config = json.loads((model_dir / "config.json").read_text())
    assert config["architectures"] == ["Qwen3ForCausalLM"]
    assert (config["hidden_size"], config["num_hidden_layers"], config["num_attention_heads"], config["num_key_value_heads"], config["head_dim"], config["vocab_size"]) == (128, 2, 4, 2, 32, 151936)
