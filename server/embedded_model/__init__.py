"""The embedded default model: a tiny Qwen3 with seeded random weights and the real Qwen tokenizer,
built offline and deterministically."""

from server.embedded_model.builder import DEFAULT_MODEL_DIR, build_embedded_model, ensure_embedded_model

__all__ = ["DEFAULT_MODEL_DIR", "build_embedded_model", "ensure_embedded_model"]
