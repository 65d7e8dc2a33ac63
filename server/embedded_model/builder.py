"""Builds the embedded default model from packages alone (no model hub).

The tokenizer is Qwen's real BPE (151 643 ranks shipped in the `dashscope` package) converted
with transformers' TikTokenConverter, plus Qwen3's added tokens; the model is a small Qwen3 whose
weights are drawn from per-tensor seeded generators, so every build is byte-identical for the
same torch version. A variant (variants.py) rescales the output head of those same weights or adds layers; an
architecture variant draws another architecture's tensors the same way, in its released checkpoint's layout
(checkpoints.py); a shape variant writes a released model's config.json beside the same tokenizer and no weights.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from server.embedded_model.checkpoints import checkpoint_tensors
from server.embedded_model.variants import DEFAULT_VARIANT, ArchitectureVariant, ShapeVariant, Variant

if TYPE_CHECKING:  # torch is imported where weights are drawn: building a shape needs none
    import torch

WEIGHT_SEED = 20251130
INIT_STD = 0.02
# MiniMax-M2's per-expert routing bias: as large as the spread of the sigmoid router's scores (about 0.06 with these
# weights), so that it changes which experts a token goes to (a router that ignored it would route otherwise).
ROUTING_BIAS_STD = 0.05
# DeepSeek-V4's hyper-connection scales (per layer and the head's), set to 1.
HYPER_CONNECTION_SCALES = ("hc_attn_scale", "hc_ffn_scale", "hc_head_scale")

# Qwen's pre-tokenizer split (single digits, unlike cl100k's \p{N}{1,3}).
QWEN_SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# Qwen3's added tokens from id 151643 on; the tool-call and think markers are not "special"
# (they survive skip_special_tokens), as on the released models.
QWEN3_ADDED_TOKENS: tuple[tuple[str, bool], ...] = (
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True),
    ("<|box_start|>", True),
    ("<|box_end|>", True),
    ("<|quad_start|>", True),
    ("<|quad_end|>", True),
    ("<|vision_start|>", True),
    ("<|vision_end|>", True),
    ("<|vision_pad|>", True),
    ("<|image_pad|>", True),
    ("<|video_pad|>", True),
    ("<tool_call>", False),
    ("</tool_call>", False),
    ("<|fim_prefix|>", True),
    ("<|fim_middle|>", True),
    ("<|fim_suffix|>", True),
    ("<|fim_pad|>", True),
    ("<|repo_name|>", True),
    ("<|file_sep|>", True),
    ("<tool_response>", False),
    ("</tool_response>", False),
    ("<think>", False),
    ("</think>", False),
)
FIRST_ADDED_TOKEN_ID = 151643
ENDOFTEXT_ID = 151643
IM_END_ID = 151645
LM_HEAD = "lm_head.weight"
# What _write_tokenizer writes.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")

MODEL_CONFIG = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "vocab_size": 151936,
    "hidden_size": 128,
    "intermediate_size": 384,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "hidden_act": "silu",
    "max_position_embeddings": 8192,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    "attention_bias": False,
    "attention_dropout": 0.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "bos_token_id": ENDOFTEXT_ID,
    "eos_token_id": IM_END_ID,
    "use_cache": True,
    "use_sliding_window": False,
    # Released Qwen3 checkpoints carry it; without it transformers 4.57 misreads the tokenizer as Mistral.
    "transformers_version": "4.51.0",
}


AnyVariant = Variant | ArchitectureVariant | ShapeVariant


def ensure_embedded_model(
    model_dir: Path | None = None, variant: AnyVariant = DEFAULT_VARIANT, tokenizer_from: Path | None = None
) -> Path:
    """Returns the model directory (by default the variant's own), building it first if it is missing
    or incomplete (`tokenizer_from`: as for build_embedded_model)."""
    model_dir = variant.directory if model_dir is None else model_dir
    if not (model_dir / "build_info.json").is_file():
        build_embedded_model(model_dir, variant, tokenizer_from)
    return model_dir


def build_embedded_model(
    model_dir: Path | None = None, variant: AnyVariant = DEFAULT_VARIANT, tokenizer_from: Path | None = None
) -> Path:
    """Builds into a temporary sibling and renames it into place, so a reader never sees half a model.
    The directory defaults to the variant's own, so a variant is never built over the default model.
    `tokenizer_from`: an embedded model's directory whose tokenizer files are copied instead of converted, for a
    host without `dashscope` (a GPU host: the weights are drawn there, the tokenizer comes with the checkout)."""
    model_dir = variant.directory if model_dir is None else model_dir
    model_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{model_dir.name}-", dir=model_dir.parent))
    staging.chmod(0o755)
    try:
        if tokenizer_from is None:
            _write_tokenizer(staging)
        else:
            for name in TOKENIZER_FILES:
                shutil.copyfile(tokenizer_from / name, staging / name)
        if isinstance(variant, ShapeVariant):
            # A released model's shape: its config over the tiny model's, and no weights.
            _write_configs(staging, {**MODEL_CONFIG, **variant.config_overrides})
        elif isinstance(variant, ArchitectureVariant):
            config = {
                **variant.config,
                "bos_token_id": ENDOFTEXT_ID,
                "eos_token_id": IM_END_ID,
                "transformers_version": MODEL_CONFIG["transformers_version"],
            }
            _write_architecture_weights(staging, config)
            _write_configs(staging, config)
        else:
            _write_weights(staging, variant)
            _write_configs(staging, qwen3_config(variant))
        _write_build_info(staging, variant)
        if model_dir.exists():
            shutil.rmtree(model_dir)
        staging.rename(model_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return model_dir


def _qwen_tiktoken_path() -> Path:
    import dashscope

    return Path(dashscope.__file__).parent / "resources" / "qwen.tiktoken"


def _write_tokenizer(out_dir: Path) -> None:
    from tokenizers import AddedToken
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter

    backend = TikTokenConverter(
        vocab_file=str(_qwen_tiktoken_path()), pattern=QWEN_SPLIT_PATTERN, additional_special_tokens=[]
    ).converted()
    added = [AddedToken(text, special=special, normalized=False) for text, special in QWEN3_ADDED_TOKENS]
    backend.add_tokens(added)
    first_id = backend.token_to_id(QWEN3_ADDED_TOKENS[0][0])
    if first_id != FIRST_ADDED_TOKEN_ID:
        raise RuntimeError(f"Qwen BPE ranks changed: <|endoftext|> got id {first_id}, expected {FIRST_ADDED_TOKEN_ID}")

    chat_template = (Path(__file__).parent / "chat_template.jinja").read_text()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, chat_template=chat_template, **_tokenizer_settings())
    tokenizer.save_pretrained(str(out_dir))
    # transformers 5 writes its own tokenizer_config.json format (class TokenizersBackend), which
    # transformers 4 cannot load: written here in the format released checkpoints carry, which both
    # read, so any transformers (4 or 5) builds the same bytes.
    (out_dir / "tokenizer_config.json").write_text(json.dumps(_tokenizer_config(), indent=2, sort_keys=True) + "\n")
    # Only transformers 4 writes it, and it repeats tokenizer_config.json's special tokens.
    (out_dir / "special_tokens_map.json").unlink(missing_ok=True)


def _tokenizer_settings() -> dict[str, object]:
    """What the tokenizer is built with and its tokenizer_config.json says."""
    return {
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "additional_special_tokens": [text for text, special in QWEN3_ADDED_TOKENS if special],
        "model_max_length": MODEL_CONFIG["max_position_embeddings"],
        "clean_up_tokenization_spaces": False,
    }


def _tokenizer_config() -> dict[str, object]:
    flags = {"lstrip": False, "normalized": False, "rstrip": False, "single_word": False}
    return {
        "added_tokens_decoder": {
            str(FIRST_ADDED_TOKEN_ID + offset): {"content": text, **flags, "special": special}
            for offset, (text, special) in enumerate(QWEN3_ADDED_TOKENS)
        },
        **_tokenizer_settings(),
        "extra_special_tokens": {},
        "tokenizer_class": "PreTrainedTokenizerFast",
    }


def qwen3_config(variant: Variant) -> dict[str, Any]:
    """The config.json of a Qwen3 weight variant: the default model's, at the variant's depth."""
    if variant.num_hidden_layers is None:
        return dict(MODEL_CONFIG)
    return {**MODEL_CONFIG, "num_hidden_layers": variant.num_hidden_layers}


def _write_weights(out_dir: Path, variant: Variant) -> None:
    import torch
    from safetensors.torch import save_file
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(**{k: v for k, v in qwen3_config(variant).items() if k not in ("architectures", "model_type")})
    with torch.device("meta"):
        skeleton = Qwen3ForCausalLM(config)
    tensors = {name: _seeded_tensor(name, tuple(param.shape)) for name, param in skeleton.state_dict().items()}
    tensors[LM_HEAD] = tensors[LM_HEAD] * variant.lm_head_scale
    save_file(tensors, str(out_dir / "model.safetensors"), metadata={"format": "pt"})


def _write_architecture_weights(out_dir: Path, config: Mapping[str, Any]) -> None:
    import torch
    from safetensors.torch import save_file

    from server.embedded_model.block_formats import quantize_fp8_blocks, quantize_mxfp4

    quantizers = {"fp8": quantize_fp8_blocks, "mxfp4": quantize_mxfp4}
    tensors = {}
    for name, (shape, storage) in checkpoint_tensors(config).items():
        if storage in quantizers:
            # Drawn in bf16 as the other weights, then stored as the released checkpoint stores it.
            weight, scale = quantizers[storage](_seeded_tensor(name, shape))
            tensors[name] = weight
            tensors[name.removesuffix(".weight") + ".scale"] = scale
        elif storage == "expert_ids":
            tensors[name] = _seeded_expert_ids(name, shape, config["n_routed_experts"])
        elif name.endswith(("e_score_correction_bias", ".gate.bias")):
            tensors[name] = _seeded_normal(name, shape, ROUTING_BIAS_STD)
        elif name.endswith(HYPER_CONNECTION_SCALES):
            # transformers' own initial value: a scale of 0.02 would leave the mixes nearly input-independent.
            tensors[name] = torch.ones(shape, dtype=torch.float32)
        else:
            tensors[name] = _seeded_tensor(name, shape).to(getattr(torch, storage))
    save_file(tensors, str(out_dir / "model.safetensors"), metadata={"format": "pt"})


def _seeded_expert_ids(name: str, shape: tuple[int, ...], num_experts: int) -> torch.Tensor:
    """A hash-routing table: per row (token id), `shape[1]` distinct expert ids, from the tensor's own generator."""
    import torch

    keys = torch.rand((shape[0], num_experts), generator=_generator(name))
    return keys.argsort(dim=1)[:, : shape[1]].to(torch.int32)


def _write_configs(out_dir: Path, config: Mapping[str, Any]) -> None:
    (out_dir / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    generation_config = {"bos_token_id": ENDOFTEXT_ID, "eos_token_id": [IM_END_ID, ENDOFTEXT_ID]}
    (out_dir / "generation_config.json").write_text(json.dumps(generation_config, indent=2) + "\n")


def _seeded_tensor(name: str, shape: tuple[int, ...]) -> torch.Tensor:
    import torch

    if name.endswith("norm.weight"):
        return torch.ones(shape, dtype=torch.bfloat16)
    return _seeded_normal(name, shape, INIT_STD).to(torch.bfloat16)


def _seeded_normal(name: str, shape: tuple[int, ...], std: float) -> torch.Tensor:
    """float32 normals from a generator of the tensor's own, keyed by its name, so adding a tensor never shifts the
    others (and a deeper variant's first layers are the shallower one's)."""
    import torch

    return torch.empty(shape, dtype=torch.float32).normal_(0.0, std, generator=_generator(name))


def _generator(name: str) -> torch.Generator:
    import torch

    name_key = int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "big")
    return torch.Generator().manual_seed(WEIGHT_SEED ^ name_key)


def _write_build_info(out_dir: Path, variant: AnyVariant) -> None:
    digests = {
        path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in sorted(out_dir.iterdir()) if path.is_file()
    }
    info = {"weight_seed": WEIGHT_SEED, "files_sha256": digests, **variant.build_info_fields()}
    (out_dir / "build_info.json").write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
