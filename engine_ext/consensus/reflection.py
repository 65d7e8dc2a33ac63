"""Per-layer reflection of the residual stream (poc-v2.md section 4).

v_i = normal(seed(f"{BH}_layer_{i}_householder"), H) / ||v|| (float32, no epsilon). After decoder layer
i of a PoC forward, the stream x becomes x - 2 (x.v_i) v_i with v_i in the activation dtype. vLLM's
decoder layers return (hidden, residual) whose sum is the stream; the map is linear, so both parts are
reflected. The engine's PoC layer stack (engine_ext.poc.layer_stack) calls `reflect_stream` with that pair.
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

    The dot product runs in x's dtype (v is cast to it); the update is one addcmul, which rounds
    x + (-2 * dot) * v once instead of rounding the product first.
    """
    if v.dim() != 1 or x.shape[-1] != v.shape[0]:
        raise ValueError(f"reflection vector of shape {tuple(v.shape)} does not match hidden size {x.shape[-1]}")
    v = v.to(dtype=x.dtype, device=x.device)
    dot = torch.matmul(x, v).unsqueeze(-1)
    return x.addcmul_(dot, v, value=-2.0)


def reflect_stream(
    hidden: torch.Tensor, residual: torch.Tensor | None, v: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Reflect a decoder layer's (hidden, residual) output, whose sum is the residual stream.

    Returns new tensors; a None residual (a layer that returns the full stream in `hidden`) stays None.
    """
    return reflect(hidden, v), (None if residual is None else reflect(residual, v))
