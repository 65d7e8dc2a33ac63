"""poc-v2.md sections 2-3 written as literally as possible, one nonce at a time.

The independent reference the consensus core's fast paths are checked against (unit tests) and
timed against (benchmarks/poc_inputs_bench.py).
"""

from __future__ import annotations

import math

import torch

from engine_ext.consensus import input_seed, stronger_sub_seeds


def spec_normal(seed: int, n: int, device: torch.device | str | None = None) -> torch.Tensor:
    """normal(seed, n): one full-length int64 hash, uniforms and half/half Box-Muller."""
    m = 0xFFFFFFFF
    p = (n + 1) // 2
    k = torch.arange(2 * p, dtype=torch.int64, device=device)
    k = (k * 0xCC9E2D51) & m
    k = ((k << 15) | (k >> 17)) & m
    k = (k * 0x1B873593) & m
    h = seed ^ k
    h = ((h << 13) | (h >> 19)) & m
    h = (h * 5 + 0xE6546B64) & m
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & m
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & m
    h ^= h >> 16
    u = h.to(torch.float32) / 4294967296.0
    u1 = torch.clamp(u[:p], min=1e-10)
    u2 = u[p:]
    r = torch.sqrt(-2.0 * torch.log(u1))
    return torch.cat([r * torch.cos(2.0 * math.pi * u2), r * torch.sin(2.0 * math.pi * u2)])[:n]


def spec_inputs(
    block_hash: str,
    public_key: str,
    nonce: int,
    seq_len: int,
    hidden: int,
    dtype: torch.dtype,
    stronger: bool,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """inputs(N): normal(...).view(S, H) cast to dtype; the stronger RNG concatenates 8 segments."""
    n = seq_len * hidden
    if stronger:
        segment = math.ceil(n / 8)
        sub_seeds = stronger_sub_seeds(block_hash, public_key, nonce)
        parts = [spec_normal(sub_seeds[j], min(segment, n - j * segment), device) for j in range(8) if j * segment < n]
        flat = torch.cat(parts)[:n]
    else:
        flat = spec_normal(input_seed(block_hash, public_key, nonce), n, device)
    return flat.view(seq_len, hidden).to(dtype)
