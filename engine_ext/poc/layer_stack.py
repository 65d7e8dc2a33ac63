"""The PoC forward's layer stack: the model's decoder layers with the per-layer reflection after each
(poc-v2.md section 4), then the final norm.

It is the decoder's own loop (vLLM's Qwen2/Qwen3/Qwen3-MoE models: `layer(positions, hidden, residual)`
returning the (hidden, residual) pair whose sum is the stream), written out so that the reflections sit
between the layers without hooks on the shared modules: inference never runs this code. The same
function runs eager (vLLM's own kernels) or compiled by torch.compile into a graph of the PoC's own,
separate from the inference graph.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import torch

from engine_ext.consensus import reflect_stream


class UnsupportedDecoder(RuntimeError):
    pass


@dataclass(frozen=True)
class DecoderLayers:
    decoder: Any
    # The decoder layers this rank holds, and the global index of the first (its reflection vector's).
    layers: list[Any]
    first_index: int


def decoder_layers(model: Any) -> DecoderLayers:
    """Refuses a model whose decoder is not shaped as above."""
    decoder = getattr(model, "model", None)
    layers = getattr(decoder, "layers", None)
    if decoder is None or layers is None or not hasattr(decoder, "norm"):
        raise UnsupportedDecoder(
            f"{type(model).__name__}: the PoC forward needs model.model.layers and model.model.norm"
        )
    first, last = int(getattr(decoder, "start_layer", 0)), int(getattr(decoder, "end_layer", len(layers)))
    held = [layers[index] for index in range(first, last)]
    expected = ["positions", "hidden_states", "residual"]
    for layer in held[:1]:
        parameters = list(inspect.signature(layer.forward).parameters)[:3]
        if parameters != expected:
            raise UnsupportedDecoder(
                f"{type(layer).__name__}.forward takes {parameters}, the PoC forward calls it with {expected}"
            )
    return DecoderLayers(decoder, held, first)


# Decoder layers whose forward is exactly: the input norm (with the residual add after the first layer), attention,
# the post-attention norm with the residual add, the MLP; returning (hidden, residual). Read in vLLM 0.15.1 to
# 0.28.0; after the attention, every row is computed on its own.
ROW_WISE_AFTER_ATTENTION = frozenset(
    {
        "vllm.model_executor.models.qwen2.Qwen2DecoderLayer",
        "vllm.model_executor.models.qwen3.Qwen3DecoderLayer",
        "vllm.model_executor.models.qwen3_moe.Qwen3MoeDecoderLayer",
    }
)


def reflected_stack(
    decoder: Any,
    layers: list[Any],
    positions: torch.Tensor,
    inputs_embeds: torch.Tensor,
    vectors: torch.Tensor,
    kept_rows: torch.Tensor | None = None,
) -> torch.Tensor:
    """[tokens, H]: the final-normed hidden states; vectors[i] reflects the stream after layers[i]. With kept_rows,
    [len(kept_rows), H]: those rows only, and the last layer computes no other row past its attention."""
    hidden, residual = inputs_embeds, None
    for offset, layer in enumerate(layers):
        if kept_rows is not None and offset == len(layers) - 1:
            hidden, residual = layer_on_rows(layer, positions, hidden, residual, kept_rows)
        else:
            hidden, residual = layer(positions, hidden, residual)
        hidden, residual = reflect_stream(hidden, residual, vectors[offset])
    hidden, _ = decoder.norm(hidden, residual)
    return hidden


def layer_on_rows(
    layer: Any, positions: torch.Tensor, hidden: torch.Tensor, residual: torch.Tensor | None, rows: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """layer(positions, hidden, residual) at `rows` only. The attention needs every token's keys and values, but a
    PoC artifact reads one token per sequence: for a layer that is row-wise after its attention, the MLP (the routed
    experts of a MoE layer) runs on the kept rows alone; any other layer runs whole before the rows are taken."""
    if f"{type(layer).__module__}.{type(layer).__qualname__}" not in ROW_WISE_AFTER_ATTENTION:
        hidden, residual = layer(positions, hidden, residual)
        return hidden[rows], residual[rows]
    if residual is None:
        residual = hidden
        hidden = layer.input_layernorm(hidden)
    else:
        hidden, residual = layer.input_layernorm(hidden, residual)
    hidden = layer.self_attn(positions=positions, hidden_states=hidden)
    hidden, residual = layer.post_attention_layernorm(hidden[rows], residual[rows])
    return layer.mlp(hidden), residual
