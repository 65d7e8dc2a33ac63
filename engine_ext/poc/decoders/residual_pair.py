"""Decoders whose layers pass a (hidden, residual) pair: vLLM's Qwen2, Qwen3, Qwen3-MoE and MiniMax-M2 models.

Each layer is `layer(positions, hidden, residual) -> (hidden, residual)`, the pair whose sum is the residual stream
(the residual is None before the first layer); the final norm adds them. The reflection is linear, so reflecting
both parts reflects the stream (poc-v2.md section 4; poc-v2-models.md section 4.3 for MiniMax-M2, whose MTP
modules are not built in the main model).

Every listed layer's forward is: the input norm (with the residual add after the first layer), attention, the
post-attention norm with the residual add, then the MLP (`mlp`, or MiniMax-M2's `block_sparse_moe`), returning
(hidden, residual); checked against vLLM's code in tests/unit/test_poc_decoders.py. Past the attention every row is
computed on its own, so the last layer can run its MLP (a MoE layer's routed experts) on the rows the head reads.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from engine_ext.consensus import reflect_stream
from engine_ext.poc.decoders.base import PocDecoder, StreamState

# The layer classes whose body is the one above, by the attribute of their MLP.
ROW_WISE_AFTER_ATTENTION = {
    "vllm.model_executor.models.qwen2.Qwen2DecoderLayer": "mlp",
    "vllm.model_executor.models.qwen3.Qwen3DecoderLayer": "mlp",
    "vllm.model_executor.models.qwen3_moe.Qwen3MoeDecoderLayer": "mlp",
    "vllm.model_executor.models.minimax_m2.MiniMaxM2DecoderLayer": "block_sparse_moe",
}


class ResidualPairDecoder(PocDecoder):
    architectures: ClassVar[tuple[str, ...]] = (
        "Qwen2ForCausalLM",
        "Qwen3ForCausalLM",
        "Qwen3MoeForCausalLM",
        "MiniMaxM2ForCausalLM",
    )
    layer_parameters: ClassVar[tuple[str, ...]] = ("positions", "hidden_states", "residual")

    def __init__(self, model: Any) -> None:
        super().__init__(model)
        self._mlp_attribute = ROW_WISE_AFTER_ATTENTION.get(_class_name(self.layers[-1])) if self.layers else None

    def initial_state(self, inputs_embeds: torch.Tensor) -> StreamState:
        return inputs_embeds, None

    def call_layer(
        self, layer: Any, positions: torch.Tensor, input_ids: torch.Tensor | None, state: StreamState
    ) -> StreamState:
        hidden, residual = state
        return layer(positions, hidden, residual)

    def reflect(self, state: StreamState, vector: torch.Tensor) -> StreamState:
        hidden, residual = state
        return reflect_stream(hidden, residual, vector)

    def final_hidden(self, state: StreamState) -> torch.Tensor:
        hidden, residual = state
        normed, _ = self.decoder.norm(hidden, residual)
        return normed

    def call_layer_on_rows(
        self,
        layer: Any,
        positions: torch.Tensor,
        input_ids: torch.Tensor | None,
        state: StreamState,
        rows: torch.Tensor,
    ) -> StreamState:
        if self._mlp_attribute is None:
            return super().call_layer_on_rows(layer, positions, input_ids, state, rows)
        hidden, residual = state
        assert hidden is not None  # only the residual is None, before the first layer
        if residual is None:
            residual = hidden
            hidden = layer.input_layernorm(hidden)
        else:
            hidden, residual = layer.input_layernorm(hidden, residual)
        hidden = layer.self_attn(positions=positions, hidden_states=hidden)
        hidden, residual = layer.post_attention_layernorm(hidden[rows], residual[rows])
        return getattr(layer, self._mlp_attribute)(hidden), residual


def _class_name(layer: Any) -> str:
    return f"{type(layer).__module__}.{type(layer).__qualname__}"
