"""The quantized weight formats of DeepSeek-V4's released checkpoint, both ways (quantize to write, dequantize to read).

* FP8 weights: float8_e4m3fn in 128 x 128 blocks, each with one power-of-two (UE8M0, stored float8_e8m0fnu) scale,
  as vLLM's DeepseekV4FP8Config reads a checkpoint whose `expert_dtype` is fp4 (`is_scale_e8m0`).
* MXFP4 experts: e2m1 values two per byte (the first element in the low nibble) with one UE8M0 scale per 32
  elements of a row, as vLLM's Mxfp4MoEMethod loads `w{1,2,3}.weight` (uint8) and `.scale` (viewed as uint8).

A power-of-two scale times an e4m3 or e2m1 value is exact in bf16, so dequantizing loses nothing: the reference and
vLLM compute with the same weights.
"""

from __future__ import annotations

import torch

FP8_BLOCK = 128
FP8_MAX = 448.0
MXFP4_BLOCK = 32
# The e2m1 code points 0..7 (bit 3 is the sign).
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
E2M1_MAX = 6.0


def power_of_two_scale(amax: torch.Tensor, target_max: float) -> torch.Tensor:
    """The smallest power of two s with amax / s <= target_max (so nothing clips), amax floored at 1e-4 as vLLM's
    UE8M0 quantizers do (fmaxf(amax, 1e-4))."""
    return torch.exp2(torch.ceil(torch.log2(amax.float().clamp(min=1e-4) / target_max)))


def quantize_fp8_blocks(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[N, K] float -> (float8_e4m3fn [N, K], float8_e8m0fnu [ceil(N/128), ceil(K/128)])."""
    rows, cols = weight.shape
    if rows % FP8_BLOCK or cols % FP8_BLOCK:
        raise ValueError(f"FP8 block weights must be multiples of {FP8_BLOCK}, got {tuple(weight.shape)}")
    blocks = weight.float().reshape(rows // FP8_BLOCK, FP8_BLOCK, cols // FP8_BLOCK, FP8_BLOCK)
    scale = power_of_two_scale(blocks.abs().amax(dim=(1, 3)), FP8_MAX)
    quantized = (blocks / scale[:, None, :, None]).reshape(rows, cols).to(torch.float8_e4m3fn)
    return quantized, scale.to(torch.float8_e8m0fnu)


def dequantize_fp8_blocks(weight: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    rows, cols = weight.shape
    blocks = weight.float().reshape(rows // FP8_BLOCK, FP8_BLOCK, cols // FP8_BLOCK, FP8_BLOCK)
    return (blocks * scale.float()[:, None, :, None]).reshape(rows, cols)


def quantize_mxfp4(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[N, K] float -> (uint8 [N, K/2], float8_e8m0fnu [N, K/32]); round to the nearest e2m1 value."""
    rows, cols = weight.shape
    blocks = weight.float().reshape(rows, cols // MXFP4_BLOCK, MXFP4_BLOCK)
    scale = power_of_two_scale(blocks.abs().amax(dim=-1), E2M1_MAX)
    scaled = (blocks / scale[..., None]).reshape(rows, cols)
    grid = torch.tensor(E2M1_VALUES)
    magnitude_code = (scaled.abs().unsqueeze(-1) - grid).abs().argmin(dim=-1)
    codes = (magnitude_code | ((scaled < 0).long() << 3)).to(torch.uint8)
    packed = codes[:, 0::2] | (codes[:, 1::2] << 4)
    return packed, scale.to(torch.float8_e8m0fnu)


def dequantize_mxfp4(packed: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    rows = packed.shape[0]
    codes = torch.stack((packed & 0x0F, packed >> 4), dim=-1).reshape(rows, -1).long()
    values = torch.tensor(E2M1_VALUES)[codes & 7] * torch.where(codes & 8 > 0, -1.0, 1.0)
    blocks = values.reshape(rows, -1, MXFP4_BLOCK) * scale.float()[..., None]
    return blocks.reshape(rows, -1)
