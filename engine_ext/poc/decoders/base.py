"""What the PoC forward needs to know about one decoder architecture (poc-v2-models.md sections 2-4).

The round, the batches, the inputs, the KV blocks and the head are the same on every model; per architecture, only
this differs: which module list holds the decoder layers, how the model's own loop calls a layer, what flows from
one layer to the next (the stream state), which of its tensors the per-layer reflection transforms, how the last
layer's output becomes the final-normed hidden state the head reads, and whether the layers need input ids. A
`PocDecoder` answers these for one architecture, as vLLM's model of it computes them: the PoC forward calls the
model's own layers, in the model's own order, with the reflection between them (code only a PoC forward runs, so
inference never sees a reflection, and nothing is hooked onto the shared modules).
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar

import torch

# What flows from one decoder layer to the next, token-major (dimension 0 is the token); None where a part does not
# exist yet (before the first layer).
StreamState = tuple[torch.Tensor | None, ...]


class UnsupportedArchitecture(RuntimeError):
    """The served model has no PoC decoder here, or its module tree is not the one the decoder was written for."""


class PocDecoder(ABC):
    """One architecture's decoder as the PoC forward runs it."""

    # Architectures (vLLM model class names, config.json's `architectures`) this decoder serves.
    architectures: ClassVar[tuple[str, ...]]
    # The first parameters of the decoder layer's forward, in order: checked against the model's layer class, so a
    # vLLM whose layers take other arguments is refused instead of being called wrongly.
    layer_parameters: ClassVar[tuple[str, ...]]
    # Whether the PoC forward compiles the layers (engine_ext.poc.compiled_layers) when asked to: only for
    # architectures vLLM itself runs through torch.compile.
    compiles: ClassVar[bool] = True
    # Whether the layers read input ids besides the embeddings (poc-v2-models.md section 2.2).
    needs_input_ids: ClassVar[bool] = False

    def __init__(self, model: Any) -> None:
        self.architecture = type(model).__name__
        decoder = getattr(model, "model", None)
        layers = getattr(decoder, "layers", None)
        if decoder is None or layers is None or not hasattr(decoder, "norm"):
            raise UnsupportedArchitecture(
                f"{self.architecture}: the PoC forward needs model.model.layers and model.model.norm"
            )
        self.decoder = decoder
        # The layers this rank holds; the global index of the first is its reflection vector's (vLLM keeps
        # placeholders for the layers of other pipeline ranks).
        first, last = int(getattr(decoder, "start_layer", 0)), int(getattr(decoder, "end_layer", len(layers)))
        self.layers: list[Any] = [layers[index] for index in range(first, last)]
        self.first_index = first
        for layer in self.layers[:1]:
            taken = tuple(inspect.signature(layer.forward).parameters)[: len(self.layer_parameters)]
            if taken != self.layer_parameters:
                raise UnsupportedArchitecture(
                    f"{type(layer).__name__}.forward takes {list(taken)}, the PoC forward calls it with {list(self.layer_parameters)}"
                )

    @property
    def name(self) -> str:
        return type(self).__name__

    @abstractmethod
    def initial_state(self, inputs_embeds: torch.Tensor) -> StreamState:
        """The state the first layer receives, from the [tokens, H] input embeddings."""

    @abstractmethod
    def call_layer(
        self, layer: Any, positions: torch.Tensor, input_ids: torch.Tensor | None, state: StreamState
    ) -> StreamState:
        """One decoder layer, called as the model's own loop calls it."""

    @abstractmethod
    def reflect(self, state: StreamState, vector: torch.Tensor) -> StreamState:
        """The per-layer reflection of a layer's output (poc-v2-models.md section 4)."""

    @abstractmethod
    def final_hidden(self, state: StreamState) -> torch.Tensor:
        """[tokens, H]: the last layer's (reflected) output after the model's final collapse and norm."""

    def call_layer_on_rows(
        self,
        layer: Any,
        positions: torch.Tensor,
        input_ids: torch.Tensor | None,
        state: StreamState,
        rows: torch.Tensor,
    ) -> StreamState:
        """call_layer at `rows` only: the whole layer, then the rows (a decoder may compute fewer rows past the
        layer's attention, where the rest of its body is row-wise)."""
        return take_rows(self.call_layer(layer, positions, input_ids, state), rows)


def take_rows(state: StreamState, rows: torch.Tensor) -> StreamState:
    return tuple(None if part is None else part[rows] for part in state)


def reflection_vectors_needed(decoder: PocDecoder) -> Sequence[int]:
    """The global layer indices whose reflection vectors this rank's forward uses."""
    return range(decoder.first_index, decoder.first_index + len(decoder.layers))
