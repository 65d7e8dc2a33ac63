"""DeepSeek-V4's quantized weight formats (server/embedded_model/block_formats.py) and the sm90 roundings the CPU
reference emulates (tests/support/deepseek_v4_sm90.py)."""

from __future__ import annotations

import torch

from server.embedded_model.block_formats import (
    E2M1_VALUES,
    dequantize_fp8_blocks,
    dequantize_mxfp4,
    quantize_fp8_blocks,
    quantize_mxfp4,
)
from tests.support.deepseek_v4_sm90 import KV_NOPE_DIM, round_through_e4m3, round_through_fp8_ds_mla


def _normal(shape: tuple[int, ...], seed: int) -> torch.Tensor:
    return torch.empty(shape).normal_(0.0, 0.02, generator=torch.Generator().manual_seed(seed))


def test_fp8_blocks_have_power_of_two_scales_and_nothing_clips() -> None:
    weight = _normal((256, 384), 1)
    quantized, scale = quantize_fp8_blocks(weight)
    assert quantized.dtype == torch.float8_e4m3fn and scale.shape == (2, 3)
    exponents = torch.log2(scale.float())
    assert torch.equal(exponents, exponents.round())
    # Within e4m3's resolution (3 mantissa bits) of the drawn weight.
    error = (dequantize_fp8_blocks(quantized, scale) - weight).abs()
    assert bool((error <= weight.abs() / 16 + scale.float().min() * 2**-9).all())


def test_fp8_blocks_round_trip_exactly() -> None:
    quantized, scale = quantize_fp8_blocks(_normal((128, 256), 2))
    again, again_scale = quantize_fp8_blocks(dequantize_fp8_blocks(quantized, scale))
    assert torch.equal(again.view(torch.uint8), quantized.view(torch.uint8))
    assert torch.equal(again_scale.view(torch.uint8), scale.view(torch.uint8))


def test_mxfp4_packs_the_first_element_in_the_low_nibble() -> None:
    row = torch.tensor([[0.5, -1.0] + [0.0] * 30])
    packed, scale = quantize_mxfp4(row)
    # amax 1 -> scale 2^ceil(log2(1/6)) = 1/4: 0.5 -> 2.0 (code 4), -1.0 -> -4.0 (code 8 | 6).
    assert float(scale.float()) == 0.25
    assert int(packed[0, 0]) == 4 | (14 << 4)
    assert torch.equal(dequantize_mxfp4(packed, scale), row)


def test_mxfp4_rounds_to_the_nearest_e2m1_value() -> None:
    weight = _normal((4, 64), 3)
    packed, scale = quantize_mxfp4(weight)
    restored = dequantize_mxfp4(packed, scale)
    grid = torch.tensor(E2M1_VALUES)
    per_element_scale = scale.float().repeat_interleave(32, dim=1)
    steps = (restored.abs() / per_element_scale).unsqueeze(-1)
    assert bool((steps == grid).any(dim=-1).all())
    nearest = (weight.abs() / per_element_scale).unsqueeze(-1).sub(grid).abs().min(dim=-1).values
    assert torch.allclose((restored.abs() - weight.abs()).abs() / per_element_scale, nearest, atol=1e-6)


def test_the_e4m3_rounding_is_idempotent_and_keeps_the_dtype() -> None:
    x = _normal((3, 256), 4).to(torch.bfloat16)
    once = round_through_e4m3(x, 128, 1e-10)
    assert once.dtype == torch.bfloat16 and not torch.equal(once, x)
    assert torch.equal(round_through_e4m3(once, 128, 1e-10), once)


def test_the_fp8_ds_mla_rounding_keeps_the_rotary_dimensions() -> None:
    kv = _normal((2, 1, 5, 512), 5).to(torch.bfloat16)
    rounded = round_through_fp8_ds_mla(kv)
    assert torch.equal(rounded[..., KV_NOPE_DIM:], kv[..., KV_NOPE_DIM:])
    assert not torch.equal(rounded[..., :KV_NOPE_DIM], kv[..., :KV_NOPE_DIM])
