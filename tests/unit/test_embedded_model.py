"""The embedded models are built offline, with the real Qwen tokenizer, byte-identically each time; the
peaked variant is the default with its output head scaled, and its next-token distributions are peaked."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoTokenizer, Qwen3ForCausalLM

from server.embedded_model import DEFAULT_VARIANT, PEAKED_VARIANT, Variant
from server.embedded_model.builder import FIRST_ADDED_TOKEN_ID, LM_HEAD, build_embedded_model

VARIANT_FIELDS = ("variant", "lm_head_scale")
# 20 random prompts of 12 tokens: 240 next-token distributions per model.
PROMPTS, PROMPT_LENGTH = 20, 12
TOP_P, TOP_K = 0.9, 20


def _installed(variant: Variant) -> Path:
    if not (variant.directory / "build_info.json").is_file():
        pytest.fail(
            f"the {variant.name} embedded model is not built at {variant.directory}: run `make test` (it builds it)"
        )
    return variant.directory


def _build_info(model_dir: Path) -> dict:
    return json.loads((model_dir / "build_info.json").read_text())


@pytest.mark.parametrize("variant", [DEFAULT_VARIANT, PEAKED_VARIANT], ids=lambda variant: variant.name)
def test_two_builds_are_byte_identical_and_match_the_installed_one(tmp_path: Path, variant: Variant) -> None:
    first = _build_info(build_embedded_model(tmp_path / "a", variant))
    second = _build_info(build_embedded_model(tmp_path / "b", variant))
    assert first == second
    assert first == _build_info(_installed(variant))
    assert set(first["files_sha256"]) >= {"model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json"}


def test_the_build_info_records_the_variant_except_the_defaults_which_predates_variants() -> None:
    assert _build_info(_installed(PEAKED_VARIANT)).items() >= {"variant": "peaked", "lm_head_scale": 32}.items()
    assert not set(_build_info(_installed(DEFAULT_VARIANT))) & set(VARIANT_FIELDS)


def test_the_peaked_variant_differs_from_the_default_only_in_its_scaled_output_head() -> None:
    default_dir, peaked_dir = _installed(DEFAULT_VARIANT), _installed(PEAKED_VARIANT)
    default_info, peaked_info = _build_info(default_dir), _build_info(peaked_dir)
    default_files, peaked_files = default_info.pop("files_sha256"), peaked_info.pop("files_sha256")
    assert {
        name for name in default_files.keys() | peaked_files.keys() if default_files.get(name) != peaked_files.get(name)
    } == {"model.safetensors"}
    assert {key: value for key, value in peaked_info.items() if key not in VARIANT_FIELDS} == default_info

    # An untied head is its own tensor: scaling it leaves the input embeddings alone.
    assert json.loads((default_dir / "config.json").read_text())["tie_word_embeddings"] is False
    default_tensors = load_file(str(default_dir / "model.safetensors"))
    peaked_tensors = load_file(str(peaked_dir / "model.safetensors"))
    assert peaked_tensors.keys() == default_tensors.keys()
    assert {tensor.dtype for tensor in peaked_tensors.values()} == {torch.bfloat16}
    changed = [name for name, tensor in default_tensors.items() if not torch.equal(tensor, peaked_tensors[name])]
    assert changed == [LM_HEAD]
    assert torch.equal(peaked_tensors[LM_HEAD], default_tensors[LM_HEAD] * PEAKED_VARIANT.lm_head_scale)


@dataclass(frozen=True)
class NextTokenSpread:
    """Medians over every position of the random prompts, at temperature 1.0."""

    top_p_kept: float  # tokens that top_p 0.9 keeps
    top1: float  # probability of the most likely token
    beyond_top_k: float  # mass that top_k 20 cuts


def _next_token_spread(model_dir: Path) -> NextTokenSpread:
    model = Qwen3ForCausalLM.from_pretrained(str(model_dir), dtype=torch.bfloat16).eval()
    generator = torch.Generator().manual_seed(0)
    prompts = torch.randint(0, FIRST_ADDED_TOKEN_ID, (PROMPTS, PROMPT_LENGTH), generator=generator)
    with torch.inference_mode():
        logits = model(prompts).logits.float().flatten(0, 1)
    probs = logits.softmax(-1).sort(-1, descending=True).values
    mass_before = probs.cumsum(-1) - probs
    # As vLLM's top-p: a token stays while the more likely ones hold less than p (so the first always stays).
    kept = (mass_before < TOP_P).sum(-1).float()
    beyond_top_k = 1.0 - mass_before[:, TOP_K]
    spread = NextTokenSpread(kept.median().item(), probs[:, 0].median().item(), beyond_top_k.median().item())
    print(f"{model_dir.name}: {spread}")
    return spread


def test_the_peaked_variant_is_peaked_so_sampling_filters_cut() -> None:
    spread = _next_token_spread(_installed(PEAKED_VARIANT))
    # Measured (torch 2.10): 8 tokens kept, top-1 0.50, 3.8% beyond the top 20.
    assert 3 <= spread.top_p_kept <= 20, spread
    # Greedy and sampled tokens agree about half the time: sometimes, not always.
    assert 0.3 <= spread.top1 <= 0.75, spread
    # Enough mass beyond the top 20 that top_k 20 changes what is sampled.
    assert 0.005 <= spread.beyond_top_k <= 0.2, spread


def test_the_default_variant_is_near_uniform_so_sampling_filters_never_cut() -> None:
    spread = _next_token_spread(_installed(DEFAULT_VARIANT))
    # Measured (torch 2.10): 129 814 of the 151 936 tokens kept, top-1 1.7e-5.
    assert spread.top_p_kept > 100_000, spread
    assert spread.top1 < 1e-3, spread


def test_the_tokenizer_is_qwens(model_dir: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    assert tokenizer.encode("Hello world, this is a test") == [9707, 1879, 11, 419, 374, 264, 1273]
    assert [
        tokenizer.convert_tokens_to_ids(t) for t in ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "</think>")
    ] == [151643, 151644, 151645, 151668]
    assert tokenizer.eos_token_id == 151645
    # Digits split one by one, as Qwen's pre-tokenizer does.
    assert len(tokenizer.encode("12345")) == 5


def test_the_config_is_a_small_qwen3(model_dir: Path) -> None:
    config = json.loads((model_dir / "config.json").read_text())
    assert config["architectures"] == ["Qwen3ForCausalLM"]
    assert (
        config["hidden_size"],
        config["num_hidden_layers"],
        config["num_attention_heads"],
        config["num_key_value_heads"],
        config["head_dim"],
        config["vocab_size"],
    ) == (128, 2, 4, 2, 32, 151936)
