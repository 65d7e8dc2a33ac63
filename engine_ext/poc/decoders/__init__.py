"""The PoC forward's per-architecture knowledge: one small `PocDecoder` per decoder family (base.py says what it
answers), found by the architecture of the model vLLM built. An architecture without one is refused by name: a
forward without its reflections would compute artifacts no validator reproduces."""

from __future__ import annotations

from typing import Any

from engine_ext.poc.decoders.base import (
    PocDecoder,
    StreamState,
    UnsupportedArchitecture,
    reflection_vectors_needed,
    take_rows,
)
from engine_ext.poc.decoders.deepseek_v4 import DeepseekV4Decoder
from engine_ext.poc.decoders.residual_pair import ResidualPairDecoder

DECODERS: tuple[type[PocDecoder], ...] = (ResidualPairDecoder, DeepseekV4Decoder)
SUPPORTED_ARCHITECTURES: tuple[str, ...] = tuple(name for decoder in DECODERS for name in decoder.architectures)


def decoder_class_for(architecture: str) -> type[PocDecoder] | None:
    return next((decoder for decoder in DECODERS if architecture in decoder.architectures), None)


def decoder_for(model: Any) -> PocDecoder:
    """The PoC decoder of the model vLLM built (its class name is the architecture it serves)."""
    architecture = type(model).__name__
    decoder = decoder_class_for(architecture)
    if decoder is None:
        raise UnsupportedArchitecture(unsupported_message(architecture))
    return decoder(model)


def unsupported_message(architecture: str) -> str:
    return (
        f"the PoC forward has no decoder for {architecture} (supported: {', '.join(SUPPORTED_ARCHITECTURES)}); "
        "start with --poc-forward off to serve inference with PoC off"
    )


__all__ = [
    "DECODERS",
    "SUPPORTED_ARCHITECTURES",
    "PocDecoder",
    "StreamState",
    "UnsupportedArchitecture",
    "decoder_class_for",
    "decoder_for",
    "reflection_vectors_needed",
    "take_rows",
    "unsupported_message",
]
