"""Uniforms and half/half Box–Muller normals (poc-v2.md section 2), one row per seed.

`normal(seed, n)`: p = ceil(n/2); u = uniform(seed, 2p); u1 = max(u[:p], 1e-10); u2 = u[p:];
r = sqrt(-2 log u1); out = concat(r cos(2 pi u2), r sin(2 pi u2))[:n], all float32. Cosines first,
then sines: the layout depends on n, so a shorter row is NOT a prefix of a longer one.

Every element is computed independently of every other, so the result does not depend on how rows
and columns are tiled: `fill_normal_rows` works tile by tile to bound memory, and any tiling, batch
order or batch size gives the same bits on a given device.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Literal

import torch

from . import cuda_fused
from ._validate import require_int_at_least
from .murmur import murmur3_32, murmur_premixed, premix_keys, premix_seeds, seeds_tensor

Backend = Literal["auto", "torch", "cuda_fused"]

UNIFORM_SCALE = 2.0**-32  # exact: dividing by 2^32 and multiplying by 2^-32 give the same float32
U1_FLOOR = 1e-10
TWO_PI = 2.0 * math.pi  # torch rounds this Python float once to float32, as the spec says

# Default tile sizes (elements of one tile). Peak extra memory of one tile: cuda_fused 4 bytes per
# element (the float32 tile), torch 16 bytes per element (the int64 hash plus its scratch). On CPU a
# 2 MiB tile stays in cache through the ~20 elementwise passes: 3-10x faster than 64 MiB tiles. On
# an H200 fused tiles of 2^22, 2^24 and 2^26 elements ran equally fast (2.2-2.3 ms a PoC batch),
# 2^20 was launch-bound (8 ms).
FUSED_TILE_ELEMENTS = 1 << 22
TORCH_CUDA_TILE_ELEMENTS = 1 << 22
TORCH_CPU_TILE_ELEMENTS = 1 << 17


def uniform(seed: int, n: int, device: torch.device | str | None = None) -> torch.Tensor:
    """uniform(seed, n)[i] = float32(murmur(i, seed)) / 2^32 for keys 0..n-1 (float32; may be 1.0)."""
    require_int_at_least("n", n, 0)
    keys = torch.arange(n, dtype=torch.int64, device=device)
    return murmur3_32(keys, seed).to(torch.float32).mul_(UNIFORM_SCALE)


def normal(seed: int, n: int, device: torch.device | str | None = None, backend: Backend = "auto") -> torch.Tensor:
    """normal(seed, n): n float32 standard normals in the half/half Box–Muller layout."""
    return normal_rows([seed], n, device=device, backend=backend)[0]


def normal_rows(
    seeds: Sequence[int] | torch.Tensor,
    n: int,
    device: torch.device | str | None = None,
    backend: Backend = "auto",
) -> torch.Tensor:
    """[R, n] float32: row r is normal(seeds[r], n)."""
    require_int_at_least("n", n, 0)
    seeds_t = seeds_tensor(seeds, device).reshape(-1)
    out = torch.empty((seeds_t.numel(), n), dtype=torch.float32, device=seeds_t.device)
    fill_normal_rows(out, seeds_t, backend=backend)
    return out


def fill_normal_rows(
    dst: torch.Tensor,
    seeds: Sequence[int] | torch.Tensor,
    *,
    tile_elements: int | None = None,
    backend: Backend = "auto",
) -> torch.Tensor:
    """Write normal(seed, L) into every row of `dst`, rounded to dst.dtype; returns dst.

    dst: [R, L] or [A, M, L] floating tensor whose last dim has stride 1 (rows may be strided views of
    a larger tensor); seeds: R (or A*M, row-major) uint32 seeds. Work goes in tiles of at most
    `tile_elements` float32 values, so the extra memory is bounded by the tile, not by the batch.
    """
    if not dst.dtype.is_floating_point:
        raise TypeError(f"normals need a floating destination tensor, got {dst.dtype}")
    if dst.dim() not in (2, 3):
        raise ValueError(f"dst must be [rows, L] or [A, M, L], got shape {tuple(dst.shape)}")
    if dst.shape[-1] > 1 and dst.stride(-1) != 1:
        raise ValueError("dst's last dimension must be contiguous (stride 1)")
    dst3 = dst if dst.dim() == 3 else dst.unsqueeze(1)
    a_rows, m_rows, length = dst3.shape
    seeds_t = seeds_tensor(seeds, dst.device).reshape(-1)
    if seeds_t.numel() != a_rows * m_rows:
        raise ValueError(f"got {seeds_t.numel()} seeds for {a_rows * m_rows} rows")
    if dst.numel() == 0:
        return dst
    use_fused = _resolve_backend(backend, dst.device)
    if tile_elements is None:
        tile_elements = default_tile_elements(dst.device, use_fused)
    require_int_at_least("tile_elements", tile_elements, 2 * m_rows)

    seeds_am = seeds_t.view(a_rows, m_rows)
    pairs = (length + 1) // 2
    tile_pairs = min(pairs, tile_elements // (2 * m_rows))
    tile_rows = max(1, min(a_rows, tile_elements // (2 * m_rows * tile_pairs)))
    make_tiles = _FusedTiles(seeds_am) if use_fused else _TorchTiles(seeds_am)
    for c0 in range(0, pairs, tile_pairs):
        c1 = min(pairs, c0 + tile_pairs)
        tile_of_rows = make_tiles.columns(pairs, c0, c1)
        for a0 in range(0, a_rows, tile_rows):
            a1 = min(a_rows, a0 + tile_rows)
            tile = tile_of_rows(a0, a1)  # [a1-a0, M, 2, c1-c0] float32: cos half, sin half
            dst3[a0:a1, :, c0:c1].copy_(tile[:, :, 0])
            s1 = min(length, pairs + c1)  # odd L: the last sine is dropped
            if s1 > pairs + c0:
                dst3[a0:a1, :, pairs + c0 : s1].copy_(tile[:, :, 1, : s1 - pairs - c0])
            del tile  # free it before the next tile is computed: one tile alive at a time
    return dst


def default_tile_elements(device: torch.device, fused: bool) -> int:
    """Tile size used when the caller gives none (see the constants above)."""
    if fused:
        return FUSED_TILE_ELEMENTS
    return TORCH_CUDA_TILE_ELEMENTS if device.type == "cuda" else TORCH_CPU_TILE_ELEMENTS


def _resolve_backend(backend: Backend, device: torch.device) -> bool:
    if backend == "auto":
        return cuda_fused.available(device)
    if backend == "cuda_fused":
        if not cuda_fused.available(device):
            raise ValueError(f"backend 'cuda_fused' needs a CUDA device, got {device}")
        return True
    if backend == "torch":
        return False
    raise ValueError(f"unknown backend {backend!r}; expected 'auto', 'torch' or 'cuda_fused'")


class _TorchTiles:
    """Eager torch tiles: the key half of the hash is computed once per column range for all rows."""

    def __init__(self, seeds_am: torch.Tensor) -> None:
        self._mixed_seeds = premix_seeds(seeds_am)[:, :, None, None]

    def columns(self, pairs: int, c0: int, c1: int) -> Callable[[int, int], torch.Tensor]:
        keys = torch.arange(c0, c1, dtype=torch.int64, device=self._mixed_seeds.device)
        mixed_keys = premix_keys(torch.stack((keys, keys + pairs)))  # [2, P]: u1 keys, u2 keys

        def rows(a0: int, a1: int) -> torch.Tensor:
            h = murmur_premixed(mixed_keys, self._mixed_seeds[a0:a1])
            u = h.to(torch.float32)
            del h
            return _box_muller_(u.mul_(UNIFORM_SCALE))

        return rows


class _FusedTiles:
    """Fused CUDA tiles: seeds and keys travel as exact float32 16-bit halves (see cuda_fused)."""

    def __init__(self, seeds_am: torch.Tensor) -> None:
        self._m = seeds_am.shape[1]
        self._seed = cuda_fused.split16(seeds_am.reshape(-1, 1, 1))
        self._want_sin = torch.arange(2, dtype=torch.float32, device=seeds_am.device).view(1, 2, 1)

    def columns(self, pairs: int, c0: int, c1: int) -> Callable[[int, int], torch.Tensor]:
        device = self._want_sin.device
        # int32 keys: 4 bytes per pair transiently, 8 bytes per pair kept for the range (two halves).
        key_a = cuda_fused.split16(torch.arange(c0, c1, dtype=torch.int32, device=device).view(1, 1, -1))
        pairs_halves = (
            torch.full((1, 1, 1), float(pairs >> 16), dtype=torch.float32, device=device),
            torch.full((1, 1, 1), float(pairs & 0xFFFF), dtype=torch.float32, device=device),
        )
        m = self._m

        def rows(a0: int, a1: int) -> torch.Tensor:
            seed = (self._seed[0][a0 * m : a1 * m], self._seed[1][a0 * m : a1 * m])
            tile = cuda_fused.normals_tile(seed, key_a, pairs_halves, self._want_sin)
            return tile.reshape(a1 - a0, m, 2, c1 - c0)

        return rows


def _box_muller_(u: torch.Tensor) -> torch.Tensor:
    """In place on uniforms [..., 2, P] (u1 row, u2 row) -> normals (cos row, sin row), float32."""
    r = u[..., 0, :].clamp_min_(U1_FLOOR).log_().mul_(-2.0).sqrt_()
    theta = u[..., 1, :].mul_(TWO_PI)
    cos = torch.cos(theta)
    theta.sin_().mul_(r)  # sin row = sin(theta) * r, the same product as r * sin(theta)
    r.mul_(cos)
    return u
