"""The embedded model's variants: the same seeded Qwen3, told apart only by how its output head is scaled.

`default` is the embedded default model, whose next-token distributions are near-uniform over the
151 936-token vocabulary. `peaked` multiplies the output head (lm_head; the model does not tie it to
the embeddings) by 32, which spreads the logits over tens of nats: at temperature 1.0, top_p 0.9 keeps
about 8 tokens at the median position and the top token carries about half the mass, so top-k, top-p
and min-p filters really cut.
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
        return {"variant": self.name, "lm_head_scale": self.lm_head_scale}


DEFAULT_VARIANT = Variant("default", MODELS_DIR / "qwen3-tiny", lm_head_scale=1)
PEAKED_VARIANT = Variant("peaked", MODELS_DIR / "qwen3-tiny-peaked", lm_head_scale=32)
VARIANTS: Mapping[str, Variant] = MappingProxyType({v.name: v for v in (DEFAULT_VARIANT, PEAKED_VARIANT)})
DEFAULT_MODEL_DIR = DEFAULT_VARIANT.directory
PEAKED_MODEL_DIR = PEAKED_VARIANT.directory
