"""The network's MurmurHash3 x86_32 variant of one 32-bit key (poc-v2.md section 2).

Body and finalizer of MurmurHash3 x86_32 for a single 4-byte block, WITHOUT the `h ^= length` step, so a
stock murmur3 library gives different numbers. Arithmetic is torch int64 holding uint32 values: every
product of two uint32 values wraps modulo 2^64 on CPU and CUDA alike, and masking to 32 bits keeps the
exact low word, so the same code gives identical integers on every device.

The hash is split in two halves because `rotl` distributes over `xor`:
    rotl13(seed ^ kmix(key)) == rotl13(seed) ^ rotl13(kmix(key)).
`premix_keys` (depends on the key only) can therefore be computed once and shared by every row of a
batch, and `premix_seeds` once per row; `murmur_premixed` finishes the hash in 13 elementwise steps.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

MASK32 = 0xFFFFFFFF
_C1 = 0xCC9E2D51
_C2 = 0x1B873593
_ADD = 0xE6546B64
_F1 = 0x85EBCA6B
_F2 = 0xC2B2AE35


def _rotl(x: torch.Tensor, r: int) -> torch.Tensor:
    return ((x << r) & MASK32) | (x >> (32 - r))


def premix_keys(keys: torch.Tensor) -> torch.Tensor:
    """Key-only part of the hash: rotl13(rotl15(key*C1)*C2), as int64 in [0, 2^32)."""
    if keys.dtype.is_floating_point or keys.dtype.is_complex or keys.dtype == torch.bool:
        raise TypeError(f"murmur keys must be an integer tensor, got {keys.dtype}")
    k = (keys.to(torch.int64) * _C1) & MASK32
    k = (_rotl(k, 15) * _C2) & MASK32
    return _rotl(k, 13)


def premix_seeds(seeds: torch.Tensor) -> torch.Tensor:
    """Seed-only part of the hash: rotl13(seed), as int64 in [0, 2^32)."""
    return _rotl(seeds.to(torch.int64) & MASK32, 13)


def murmur_premixed(mixed_keys: torch.Tensor, mixed_seeds: torch.Tensor) -> torch.Tensor:
    """Finish the hash from the two premixed halves (broadcast against each other)."""
    h = torch.bitwise_xor(mixed_keys, mixed_seeds)
    h.mul_(5).add_(_ADD).bitwise_and_(MASK32)
    # One scratch tensor for the three xor-shifts of the finalizer: the peak is two int64 per element.
    t = torch.empty_like(h)
    torch.bitwise_right_shift(h, 16, out=t)
    h.bitwise_xor_(t)
    h.mul_(_F1).bitwise_and_(MASK32)
    torch.bitwise_right_shift(h, 13, out=t)
    h.bitwise_xor_(t)
    h.mul_(_F2).bitwise_and_(MASK32)
    torch.bitwise_right_shift(h, 16, out=t)
    h.bitwise_xor_(t)
    return h


def seeds_tensor(seeds: int | Sequence[int] | torch.Tensor, device: torch.device | str | None) -> torch.Tensor:
    """uint32 seeds as an int64 tensor on `device`, checking the range of Python ints."""
    if isinstance(seeds, torch.Tensor):
        return seeds.to(device=device, dtype=torch.int64)
    values = [seeds] if isinstance(seeds, int) else list(seeds)
    for s in values:
        if isinstance(s, bool) or not isinstance(s, int) or not 0 <= s <= MASK32:
            raise ValueError(f"a seed must be an int in [0, 2^32), got {s!r}")
    out = torch.tensor(values, dtype=torch.int64, device=device)
    return out.reshape(()) if isinstance(seeds, int) else out


def murmur3_32(keys: torch.Tensor, seeds: int | Sequence[int] | torch.Tensor) -> torch.Tensor:
    """murmur(key, seed) for integer `keys` and uint32 `seeds`, broadcast together; int64 in [0, 2^32).

    Vectorized over keys and over a batch of per-row seeds: keys [n] with seeds [B, 1] gives [B, n].
    """
    return murmur_premixed(premix_keys(keys), premix_seeds(seeds_tensor(seeds, keys.device)))
