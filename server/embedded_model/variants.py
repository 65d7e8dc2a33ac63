"""The embedded model's variants: the same seeded Qwen3, told apart by how its output head is scaled or how
many layers it has.

`default` is the embedded default model, whose next-token distributions are near-uniform over the
151 936-token vocabulary. `peaked` multiplies the output head (lm_head; the model does not tie it to
the embeddings) by 32, which spreads the logits over tens of nats: at temperature 1.0, top_p 0.9 keeps
about 8 tokens at the median position and the top token carries about half the mass, so top-k, top-p
and min-p filters really cut. `qwen3-tiny-16-layers` is the default model 16 layers deep (its first two
layers are the default's: every tensor is seeded by its name), for the PoC forward's compile scheme.

The architecture variants (`ArchitectureVariant`) are tiny random-weight models of the network's other
architectures (MiniMax-M2, DeepSeek-V4), with the same tokenizer, built the same way.

The shape variants (`ShapeVariant`) are released models' shapes with the same tokenizer and no weights, for GPU
hosts: vLLM serves them with `--load-format dummy`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

MODELS_DIR = Path(__file__).resolve().parents[2] / ".build" / "models"


@dataclass(frozen=True)
class Variant:
    name: str
    directory: Path
    lm_head_scale: int
    # None: the default model's depth (2 layers).
    num_hidden_layers: int | None = None

    def __post_init__(self) -> None:
        # A power of two scales a bf16 tensor exactly, so a variant's head is exactly the default's
        # times the scale and every other tensor stays byte-identical.
        if self.lm_head_scale < 1 or self.lm_head_scale & (self.lm_head_scale - 1):
            raise ValueError(f"lm_head_scale must be a power of two, got {self.lm_head_scale}")

    def build_info_fields(self) -> dict[str, Any]:
        """What build_info.json records about the variant; the default's record predates variants and
        stays byte-identical, so a record without `variant` is the default."""
        if self == DEFAULT_VARIANT:
            return {}
        depth = {} if self.num_hidden_layers is None else {"num_hidden_layers": self.num_hidden_layers}
        return {"variant": self.name, "lm_head_scale": self.lm_head_scale, **depth}


@dataclass(frozen=True)
class ArchitectureVariant:
    """A tiny model of another architecture than Qwen3, with seeded random weights in its released checkpoint's
    tensor layout (so that vLLM and transformers both load it as they load the released model) and the embedded
    model's tokenizer."""

    name: str
    directory: Path
    # The whole config.json.
    config: Mapping[str, Any]

    def build_info_fields(self) -> dict[str, Any]:
        return {"variant": self.name}


@dataclass(frozen=True)
class ShapeVariant:
    """A released model's shape (its config.json) with the embedded model's tokenizer files and no weights.

    vLLM serves it with `--load-format dummy`, which draws random weights on the device, so a GPU host is checked
    at the real size (memory, kernels, throughput) without the checkpoint. Artifacts of such a model cannot be
    compared with a transformers reference (that would need the same weights): the tiny model is for that.
    """

    name: str
    directory: Path
    # Over the tiny model's config.json: what the released model's config.json says differently.
    config_overrides: Mapping[str, Any]

    def build_info_fields(self) -> dict[str, Any]:
        # No weights are written, so none were seeded.
        return {"variant": self.name, "weight_seed": None, "weights": "none: serve with --load-format dummy"}


DEFAULT_VARIANT = Variant("default", MODELS_DIR / "qwen3-tiny", lm_head_scale=1)
PEAKED_VARIANT = Variant("peaked", MODELS_DIR / "qwen3-tiny-peaked", lm_head_scale=32)
# Qwen/Qwen3-8B: 36 dense layers.
QWEN3_8B_SHAPE = ShapeVariant(
    "qwen3-8b-shape",
    MODELS_DIR / "qwen3-8b-shape",
    MappingProxyType(
        {
            "hidden_size": 4096,
            "intermediate_size": 12288,
            "num_hidden_layers": 36,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "max_position_embeddings": 40960,
        }
    ),
)
# Qwen/Qwen3-30B-A3B: 48 layers, each a mixture of 128 experts of which 8 run per token (transformers'
# Qwen3MoeConfig names). Every layer is sparse (decoder_sparse_step 1, no mlp_only_layers), so intermediate_size
# (the dense MLP's) is unused; it is kept as the released config has it.
QWEN3_30B_A3B_SHAPE = ShapeVariant(
    "qwen3-30b-a3b-shape",
    MODELS_DIR / "qwen3-30b-a3b-shape",
    MappingProxyType(
        {
            "architectures": ("Qwen3MoeForCausalLM",),
            "model_type": "qwen3_moe",
            "hidden_size": 2048,
            "intermediate_size": 6144,
            "num_hidden_layers": 48,
            "num_attention_heads": 32,
            "num_key_value_heads": 4,
            "head_dim": 128,
            "num_experts": 128,
            "num_experts_per_tok": 8,
            "moe_intermediate_size": 768,
            "decoder_sparse_step": 1,
            "mlp_only_layers": (),
            "norm_topk_prob": True,
            "max_position_embeddings": 40960,
        }
    ),
)
# The default model 16 layers deep: the compile scheme of the PoC forward (benchmarks/poc_compile_bench.py).
DEEP_VARIANT = Variant(
    "qwen3-tiny-16-layers", MODELS_DIR / "qwen3-tiny-16-layers", lm_head_scale=1, num_hidden_layers=16
)
# MiniMax-M2's architecture (MiniMaxM2ForCausalLM, poc-v2-models.md section 7.1) at the size of the embedded model:
# full attention with grouped KV heads (4 query heads on 2), per-layer q/k norms over all heads, partial rotary
# embedding (16 of 32 dimensions, as 64 of the released 128), and a mixture of 16 experts of which 4 run per token,
# routed by a sigmoid with a per-expert bias, as the released model's 256 and 8. Its vocabulary is the released
# model's 200 064 rows (the Qwen tokenizer's 151 669 ids fit in it); bf16, as vLLM's CPU experts route by softmax
# only in their quantized path.
MINIMAX_M2_TINY = ArchitectureVariant(
    "minimax-m2-tiny",
    MODELS_DIR / "minimax-m2-tiny",
    MappingProxyType(
        {
            "architectures": ("MiniMaxM2ForCausalLM",),
            "model_type": "minimax_m2",
            "vocab_size": 200064,
            "hidden_size": 128,
            "intermediate_size": 64,
            "num_hidden_layers": 3,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 32,
            "rotary_dim": 16,
            "num_local_experts": 16,
            "num_experts_per_tok": 4,
            "scoring_func": "sigmoid",
            "use_routing_bias": True,
            "use_qk_norm": True,
            "qk_norm_type": "per_layer",
            "hidden_act": "silu",
            "max_position_embeddings": 8192,
            "rms_norm_eps": 1e-6,
            "rope_theta": 5000000.0,
            "attention_dropout": 0.0,
            "tie_word_embeddings": False,
            "torch_dtype": "bfloat16",
            "use_cache": True,
        }
    ),
)
# MiniMax-M2.7 as served (poc-v2-models.md section 7.1: 62 layers, H 3072, vocabulary 200 064, 48 query heads on 8 KV
# heads of 128 with partial rotary 64 and per-layer q/k norms, 256 experts of which 8 run per token, routed by a
# sigmoid with a bias; the expert width 1536 and the rest are MiniMax-M2's config, which the spec assumes unchanged),
# 8 layers deep to fit one GPU, in the checkpoint's FP8 (128 x 128 weight blocks, dynamic activation scales; the
# router, its bias and the output head unquantized). The benchmarks scale its figures to the full 62 layers.
MINIMAX_M27_SHAPE = ShapeVariant(
    "minimax-m2.7-shape-8-layers",
    MODELS_DIR / "minimax-m2.7-shape-8-layers",
    MappingProxyType(
        {
            **MINIMAX_M2_TINY.config,
            "hidden_size": 3072,
            "intermediate_size": 1536,
            "num_hidden_layers": 8,
            "num_attention_heads": 48,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "rotary_dim": 64,
            "num_local_experts": 256,
            "num_experts_per_tok": 8,
            "max_position_embeddings": 196608,
            "quantization_config": {
                "quant_method": "fp8",
                "fmt": "float8_e4m3fn",
                "activation_scheme": "dynamic",
                "weight_block_size": (128, 128),
                "modules_to_not_convert": ("gate", "e_score_correction_bias", "lm_head"),
            },
        }
    ),
)
# DeepSeek-V4-Flash as served (poc-v2-models.md section 7.1: H 4096, vocabulary 129 280, MQA head 512 with rotary 64,
# 64 query heads, 4 hyper-connection streams, 256 routed experts + 1 shared of which 6 run per token, the first 3
# layers hash-routed; sliding window 128, compressed layers at ratio 4 with the indexer's top 512 and at ratio 128),
# 4 layers deep: two sliding-window layers, one at ratio 4 and one at ratio 128, as the released model's first
# layers and both compressed kinds; the first 3 hash-routed. The other numbers are transformers' DeepseekV4Config
# defaults (q rank 1024, output groups 8 of rank 1024, expert width 2048, indexer 64 heads of 128, routed scale 1.5,
# sqrt-softplus scoring, SwiGLU clamp 10, 20 Sinkhorn iterations) and the released checkpoint's format as vLLM's
# DeepseekV4FP8Config reads it: FP8 attention and dense weights in 128 x 128 blocks with UE8M0 scales, MXFP4
# experts (`expert_dtype` fp4); YaRN x16 over 65 536 positions; no MTP layer. The Qwen tokenizer's larger
# vocabulary is harmless to PoC, which feeds embeddings and pseudo ids below `vocab_size` (poc-v2-models.md section
# 2.2); a chat prompt carries the template's tokens past the 129,280 rows and is refused (TOKEN_OUT_OF_VOCABULARY).
DEEPSEEK_V4_FLASH_SHAPE = ShapeVariant(
    "deepseek-v4-flash-shape-4-layers",
    MODELS_DIR / "deepseek-v4-flash-shape-4-layers",
    MappingProxyType(
        {
            "architectures": ("DeepseekV4ForCausalLM",),
            "model_type": "deepseek_v4",
            "vocab_size": 129280,
            "hidden_size": 4096,
            "num_hidden_layers": 4,
            "num_attention_heads": 64,
            "num_key_value_heads": 1,
            "head_dim": 512,
            "qk_rope_head_dim": 64,
            "q_lora_rank": 1024,
            "o_groups": 8,
            "o_lora_rank": 1024,
            "sliding_window": 128,
            "compress_ratios": (0, 0, 4, 128),
            "compress_rope_theta": 160000.0,
            "index_n_heads": 64,
            "index_head_dim": 128,
            "index_topk": 512,
            "hc_mult": 4,
            "hc_sinkhorn_iters": 20,
            "hc_eps": 1e-6,
            "n_routed_experts": 256,
            "n_shared_experts": 1,
            "num_experts_per_tok": 6,
            "moe_intermediate_size": 2048,
            "num_hash_layers": 3,
            "scoring_func": "sqrtsoftplus",
            "topk_method": "noaux_tc",
            "norm_topk_prob": True,
            "routed_scaling_factor": 1.5,
            "swiglu_limit": 10.0,
            "hidden_act": "silu",
            "rms_norm_eps": 1e-6,
            "rope_theta": 10000.0,
            "rope_scaling": {
                "rope_type": "yarn",
                "factor": 16.0,
                "original_max_position_embeddings": 65536,
                "beta_fast": 32,
                "beta_slow": 1,
            },
            "max_position_embeddings": 1048576,
            "num_nextn_predict_layers": 0,
            "tie_word_embeddings": False,
            "expert_dtype": "fp4",
            "quantization_config": {
                "quant_method": "fp8",
                "fmt": "e4m3",
                "scale_fmt": "ue8m0",
                "activation_scheme": "dynamic",
                "weight_block_size": (128, 128),
            },
        }
    ),
)
# DeepSeek-V4-Flash's architecture small enough for a CPU reference (transformers) yet in shapes vLLM 0.25.1's sm90
# kernels take: what they hard-wire stays as released (MLA head 512 with rotary 64, whose fp8_ds_mla cache rows are
# 448 FP8 + 64 bf16; 64 query heads, FlashMLA's smallest h_q; 8 output groups; indexer 64 heads of 128; 4
# hyper-connection streams; window 128; ratios 4 and 128; MXFP4 experts, FP8 128 x 128 blocks with UE8M0 scales),
# the free widths shrink to multiples of 128 or 256 (hidden 512, q rank 256, output rank 128, 16 experts of width 256
# of which 4 run per token). The first 2 of the 4 layers are hash-routed, so the learned router runs too. The
# vocabulary is the network's 129 280: the pseudo input ids (poc-v2-models.md section 2.2) take it as modulus.
DEEPSEEK_V4_TINY = ArchitectureVariant(
    "deepseek-v4-tiny",
    MODELS_DIR / "deepseek-v4-tiny",
    MappingProxyType(
        {
            **DEEPSEEK_V4_FLASH_SHAPE.config_overrides,
            "hidden_size": 512,
            "q_lora_rank": 256,
            "o_lora_rank": 128,
            "n_routed_experts": 16,
            "num_experts_per_tok": 4,
            "moe_intermediate_size": 256,
            "num_hash_layers": 2,
            "torch_dtype": "bfloat16",
        }
    ),
)
VARIANTS: Mapping[str, Variant | ArchitectureVariant | ShapeVariant] = MappingProxyType(
    {
        v.name: v
        for v in (
            DEFAULT_VARIANT,
            PEAKED_VARIANT,
            DEEP_VARIANT,
            MINIMAX_M2_TINY,
            QWEN3_8B_SHAPE,
            QWEN3_30B_A3B_SHAPE,
            MINIMAX_M27_SHAPE,
            DEEPSEEK_V4_FLASH_SHAPE,
            DEEPSEEK_V4_TINY,
        )
    }
)
DEFAULT_MODEL_DIR = DEFAULT_VARIANT.directory
PEAKED_MODEL_DIR = PEAKED_VARIANT.directory
MINIMAX_M2_MODEL_DIR = MINIMAX_M2_TINY.directory
DEEPSEEK_V4_TINY_MODEL_DIR = DEEPSEEK_V4_TINY.directory
