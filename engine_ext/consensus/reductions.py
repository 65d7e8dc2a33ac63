"""Sums and norms over the last dimension in one fixed pairwise order.

torch's reductions pick their summation order from the tensor's shape and device, so a row's sum can
change in the last bit with the batch size. Here the row is zero-padded to a power of two and halved
elementwise: every row is summed in the same order whatever the batch, and since each step is a
correctly rounded IEEE float32 add, CPU and CUDA give the same bits for the same inputs.
"""

from __future__ import annotations

import torch


def pairwise_sum(x: torch.Tensor) -> torch.Tensor:
    """Sum over the last dimension in a fixed pairwise order; shape x.shape[:-1]."""
    width = x.shape[-1]
    if width == 0:
        return x.new_zeros(x.shape[:-1])
    padded = 1 << (width - 1).bit_length()
    if padded != width:
        # Adding +0.0 leaves every partial sum unchanged.
        x = torch.cat((x, x.new_zeros((*x.shape[:-1], padded - width))), dim=-1)
    while padded > 1:
        padded //= 2
        x = x[..., :padded] + x[..., padded:]
    return x[..., 0]


def pairwise_norm(x: torch.Tensor) -> torch.Tensor:
    """Euclidean norm over the last dimension, summed in the fixed pairwise order."""
    return torch.sqrt(pairwise_sum(x * x))
