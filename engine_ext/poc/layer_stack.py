"""The PoC forward's layer stack on any supported decoder (engine_ext.poc.decoders): the model's decoder layers in
its own order, each followed by the per-layer reflection (poc-v2.md section 4), then the model's final collapse and
norm, read at the rows the head uses.

The stack is a loop over two steps, so that the same loop runs eager (the steps as written, vLLM's own kernels) or
compiled (engine_ext.poc.compiled_layers: each step compiled once per layer kind and reused across the layers):
- `reflected_layer`: one layer, then its reflection;
- `reflected_last_layer`: the last layer at the kept rows only where the decoder can (the head reads one token per
  sequence), its reflection, the final collapse and norm.
The eager forward's last step is `eager_last_layer`: the whole last layer and the final norm on every token, as the
model's own forward computes them, then the rows.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from engine_ext.poc.decoders import PocDecoder, StreamState

LayerStep = Callable[[PocDecoder, Any, torch.Tensor, torch.Tensor | None, StreamState, torch.Tensor], StreamState]
LastLayerStep = Callable[
    [PocDecoder, Any, torch.Tensor, torch.Tensor | None, StreamState, torch.Tensor, torch.Tensor], torch.Tensor
]


def reflected_layer(
    decoder: PocDecoder,
    layer: Any,
    positions: torch.Tensor,
    input_ids: torch.Tensor | None,
    state: StreamState,
    vector: torch.Tensor,
) -> StreamState:
    return decoder.reflect(decoder.call_layer(layer, positions, input_ids, state), vector)


def reflected_last_layer(
    decoder: PocDecoder,
    layer: Any,
    positions: torch.Tensor,
    input_ids: torch.Tensor | None,
    state: StreamState,
    vector: torch.Tensor,
    rows: torch.Tensor,
) -> torch.Tensor:
    """[len(rows), H]: the last layer computes no other row past its attention where the decoder can."""
    return decoder.final_hidden(
        decoder.reflect(decoder.call_layer_on_rows(layer, positions, input_ids, state, rows), vector)
    )


def eager_last_layer(
    decoder: PocDecoder,
    layer: Any,
    positions: torch.Tensor,
    input_ids: torch.Tensor | None,
    state: StreamState,
    vector: torch.Tensor,
    rows: torch.Tensor,
) -> torch.Tensor:
    return decoder.final_hidden(reflected_layer(decoder, layer, positions, input_ids, state, vector))[rows]


def run_stack(
    decoder: PocDecoder,
    positions: torch.Tensor,
    inputs_embeds: torch.Tensor,
    input_ids: torch.Tensor | None,
    vectors: torch.Tensor,
    rows: torch.Tensor,
    step: LayerStep = reflected_layer,
    last_step: LastLayerStep = eager_last_layer,
) -> torch.Tensor:
    """[len(rows), H]: the final-normed hidden states at `rows`; vectors[i] reflects the stream after layers[i]."""
    layers = decoder.layers
    state = decoder.initial_state(inputs_embeds)
    for offset, layer in enumerate(layers[:-1]):
        state = step(decoder, layer, positions, input_ids, state, vectors[offset])
    return last_step(decoder, layers[-1], positions, input_ids, state, vectors[len(layers) - 1], rows)
