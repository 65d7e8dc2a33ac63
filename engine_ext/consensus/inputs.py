"""PoC input embeddings for a batch of nonces (poc-v2.md section 3), written into the caller's tensor.

Base RNG: row = normal(seed(f"{BH}_{PK}_nonce{N}"), S*H).view(S, H), rounded to the model's dtype.
Stronger RNG: d = SHA-256 of that string; eight sub-seeds s_j = d[4j:4j+4]; the row is the
concatenation of segments normal(s_j, min(Lseg, n - j*Lseg)), Lseg = ceil(n/8), for j*Lseg < n.

Memory: nothing of batch size is allocated besides the caller's `out`; the copy into `out` allocates
nothing. Work goes tile by tile (see rng.fill_normal_rows); the peak extra memory of one call is
  - cuda_fused backend (default on CUDA): the float32 tile, 4 bytes x tile_elements (16 MiB at the
    default 2^22), plus the tile's key vector, 8 bytes per pair of its column range (+4 transient):
    16 MiB (+8) for a PoC row of 1024 x 4096, at most 16 MiB (+8) at the default tile size;
  - torch backend (default on CPU): the int64 hash and its scratch, 16 bytes x tile_elements
    (2 MiB at the CPU default 2^17, 64 MiB at the CUDA default 2^22), plus 16 bytes per pair of the
    column range for the premixed keys.
Neither depends on the batch size.
The inputs must live in memory of their own (never a view of KV-cache storage): see poc-v2.md 3.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ._validate import require_int_at_least
from .rng import Backend, fill_normal_rows
from .seeds import input_seed, stronger_sub_seeds


def generate_inputs(
    out: torch.Tensor,
    block_hash: str,
    public_key: str,
    nonces: Sequence[int],
    *,
    stronger_rng: bool = False,
    tile_elements: int | None = None,
    backend: Backend = "auto",
) -> torch.Tensor:
    """Fill out[b] ([B, S, H], the model's dtype and device) with the inputs of nonces[b]; returns out."""
    if out.dim() != 3:
        raise ValueError(f"out must be [batch, seq_len, hidden], got shape {tuple(out.shape)}")
    batch, seq_len, hidden = out.shape
    if batch != len(nonces):
        raise ValueError(f"out has {batch} rows but {len(nonces)} nonces were given")
    require_int_at_least("seq_len", seq_len, 1)
    require_int_at_least("hidden", hidden, 1)
    if not out.dtype.is_floating_point:
        raise TypeError(f"out must have a floating dtype (the model's), got {out.dtype}")
    n = seq_len * hidden
    try:
        rows = out.view(batch, n)
    except RuntimeError as exc:
        raise ValueError("each out[b] must be contiguous so that it can be filled in place") from exc
    if batch == 0:
        return out

    if not stronger_rng:
        seeds = [input_seed(block_hash, public_key, nonce) for nonce in nonces]
        fill_normal_rows(rows, seeds, tile_elements=tile_elements, backend=backend)
        return out

    seg_len = -(-n // 8)
    full = n // seg_len  # segments of full length; at most one shorter segment follows
    sub_seeds = [stronger_sub_seeds(block_hash, public_key, nonce) for nonce in nonces]
    fill_normal_rows(
        rows[:, : full * seg_len].view(batch, full, seg_len),
        [s for row in sub_seeds for s in row[:full]],
        tile_elements=tile_elements,
        backend=backend,
    )
    if full * seg_len < n:
        fill_normal_rows(
            rows[:, full * seg_len :],
            [row[full] for row in sub_seeds],
            tile_elements=tile_elements,
            backend=backend,
        )
    return out


def inputs_for_nonce(
    block_hash: str,
    public_key: str,
    nonce: int,
    seq_len: int,
    hidden: int,
    *,
    dtype: torch.dtype,
    device: torch.device | str | None = None,
    stronger_rng: bool = False,
    backend: Backend = "auto",
) -> torch.Tensor:
    """The [seq_len, hidden] inputs of one nonce, in a new tensor (validators, tests)."""
    require_int_at_least("seq_len", seq_len, 1)
    require_int_at_least("hidden", hidden, 1)
    out = torch.empty((1, seq_len, hidden), dtype=dtype, device=device)
    return generate_inputs(out, block_hash, public_key, [nonce], stronger_rng=stronger_rng, backend=backend)[0]
