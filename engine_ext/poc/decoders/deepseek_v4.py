"""DeepSeek-V4 (vLLM's `DeepseekV4ForCausalLM`, its NVIDIA model; poc-v2-models.md sections 2.2, 4.3).

The residual stream is a manifold-constrained hyper-connection of 4 streams: each layer is
`layer(x, positions, input_ids, post_mix, res_mix, residual) -> (x [T, H], residual [T, 4, H], post_mix, res_mix)`,
with the previous layer's stream update (`hc_post`) deferred into the next layer; after the last layer the model
applies it (`mhc_post`), collapses the streams (`hc_head`) and normalizes. As the deployed plugin's hooks do, the
reflection after layer i transforms `x` and every residual stream (along H) and passes `post_mix`/`res_mix` through:
`hc_post` is linear in (x, residual) and mixes only along the stream axis, so this reflects every materialised
stream. The last layer's reflection comes before `mhc_post -> hc_head -> norm`.

The first layers route their experts by `tid2eid[input_ids]`: the PoC forward passes the spec's pseudo input ids.
vLLM runs this model eagerly (its NVIDIA model has no torch.compile decorator; its mHC kernels are TileLang's), so
the PoC forward does too. vLLM 0.25 repeats the embeddings over the 4 streams before the first layer; 0.28 hands the
first layer the [T, H] embeddings and broadcasts them inside it (`hc_attn_fn_broadcast`): the same streams.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from engine_ext.consensus import reflect
from engine_ext.poc.decoders.base import PocDecoder, StreamState


class DeepseekV4Decoder(PocDecoder):
    architectures: ClassVar[tuple[str, ...]] = ("DeepseekV4ForCausalLM",)
    layer_parameters: ClassVar[tuple[str, ...]] = ("x", "positions", "input_ids", "post_mix", "res_mix", "residual")
    compiles: ClassVar[bool] = False
    needs_input_ids: ClassVar[bool] = True

    def __init__(self, model: Any) -> None:
        super().__init__(model)
        self.streams = int(self.decoder.hc_mult)
        # vLLM 0.28's layers broadcast [T, H] embeddings over the streams themselves.
        self._layers_broadcast = bool(self.layers) and hasattr(self.layers[0], "hc_attn_fn_broadcast")

    def initial_state(self, inputs_embeds: torch.Tensor) -> StreamState:
        x = inputs_embeds if self._layers_broadcast else inputs_embeds.unsqueeze(-2).repeat(1, self.streams, 1)
        return x, None, None, None

    def call_layer(
        self, layer: Any, positions: torch.Tensor, input_ids: torch.Tensor | None, state: StreamState
    ) -> StreamState:
        x, residual, post_mix, res_mix = state
        return layer(x, positions, input_ids, post_mix, res_mix, residual)

    def reflect(self, state: StreamState, vector: torch.Tensor) -> StreamState:
        x, residual, post_mix, res_mix = state
        return reflect(x, vector), None if residual is None else reflect(residual, vector), post_mix, res_mix

    def final_hidden(self, state: StreamState) -> torch.Tensor:
        from vllm.model_executor.kernels.mhc.tilelang import hc_head_fused_kernel_tilelang, mhc_post_tilelang

        x, residual, post_mix, res_mix = state
        decoder = self.decoder
        streams = mhc_post_tilelang(x, residual, post_mix, res_mix)
        collapsed = hc_head_fused_kernel_tilelang(
            streams,
            decoder.hc_head_fn,
            decoder.hc_head_scale,
            decoder.hc_head_base,
            decoder.rms_norm_eps,
            decoder.hc_eps,
        )
        return decoder.norm(collapsed)
