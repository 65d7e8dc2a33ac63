"""The embedded default model: a tiny Qwen3 with seeded random weights and the real Qwen tokenizer,
built offline and deterministically; and its peaked variant, whose sampling filters really cut."""

from server.embedded_model.builder import build_embedded_model, ensure_embedded_model
from server.embedded_model.variants import (
    DEFAULT_MODEL_DIR,
    DEFAULT_VARIANT,
    PEAKED_MODEL_DIR,
    PEAKED_VARIANT,
    VARIANTS,
    Variant,
)

__all__ = [
    "DEFAULT_MODEL_DIR",
    "DEFAULT_VARIANT",
    "PEAKED_MODEL_DIR",
    "PEAKED_VARIANT",
    "VARIANTS",
    "Variant",
    "build_embedded_model",
    "ensure_embedded_model",
]
