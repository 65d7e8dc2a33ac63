"""Per-layer reflection of the residual stream (poc-v2.md section 4; poc-v2-models.md section 4).

v_i = normal(seed(f"{BH}_layer_{i}_householder"), H) / ||v|| (float32, no epsilon). After decoder layer
i of a PoC forward, the stream x becomes x - 2 (x.v_i) v_i with v_i in the activation dtype. vLLM's
decoder layers return (hidden, residual) whose sum is the stream; the map is linear, so both parts are
reflected. The engine's PoC decoders (engine_ext.poc.decoders) call `reflect_stream` with that pair, or
`reflect` on each part of a hyper-connection stream (DeepSeek-V4).

The arithmetic is the deployed plugin's, in its rounding order (poc-v2-models.md section 4.2), so that an
eager forward is bit-close to the fleet's: in the activation dtype, p = x * v, dot = sum(p) over the last
dimension (accumulated in float32 by torch, rounded once), t = (2 * dot) * v, y = x - t, each rounded. The
order this project used before (one matmul for the dot, one addcmul for the update) differs by ulps per layer:
benchmarks/studies/reflection_order.py measures it (docs/poc.md).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ._validate import require_int_at_least
from .reductions import pairwise_norm
from .rng import Backend, normal_rows
from .seeds import layer_seed


def layer_vectors(
    block_hash: str,
    layer_indices: Sequence[int],
    hidden: int,
    *,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
    backend: Backend = "auto",
) -> torch.Tensor:
    """[len(layer_indices), hidden]: the unit reflection vector of each global layer index, in `dtype`.

    Normalized in float32, then rounded once to `dtype` (the activation dtype of the stream).
    """
    require_int_at_least("hidden", hidden, 1)
    seeds = [layer_seed(block_hash, i) for i in layer_indices]
    v = normal_rows(seeds, hidden, device=device, backend=backend)
    return (v / pairwise_norm(v).unsqueeze(-1)).to(dtype)


def layer_vector(
    block_hash: str,
    layer_index: int,
    hidden: int,
    *,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
    backend: Backend = "auto",
) -> torch.Tensor:
    """[hidden]: the unit reflection vector of one global layer index."""
    return layer_vectors(block_hash, [layer_index], hidden, dtype=dtype, device=device, backend=backend)[0]


def reflect(x: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """x - 2 (x.v) v over the last dimension, in x's dtype (a new tensor)."""
    return reflect_(x.clone(), v)


def reflect_(x: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """In-place x <- x - 2 (x.v) v over the last dimension; returns x.

    In x's dtype (v is cast to it), in the deployed plugin's order: the elementwise product, its sum, twice the
    sum, times v, subtracted, each step rounded to the dtype.
    """
    if v.dim() != 1 or x.shape[-1] != v.shape[0]:
        raise ValueError(f"reflection vector of shape {tuple(v.shape)} does not match hidden size {x.shape[-1]}")
    v = v.to(dtype=x.dtype, device=x.device)
    dot = (x * v).sum(dim=-1, keepdim=True)
    return x.sub_((2 * dot) * v)


def reflect_stream(
    hidden: torch.Tensor, residual: torch.Tensor | None, v: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Reflect a decoder layer's (hidden, residual) output, whose sum is the residual stream.

    Returns new tensors; a None residual (a layer that returns the full stream in `hidden`) stays None.
    """
    return reflect(hidden, v), (None if residual is None else reflect(residual, v))
