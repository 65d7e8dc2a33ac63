"""DeepSeek-V4's pseudo input ids (poc-v2-models.md section 2.2).

V4's first MoE layers route each token by `tid2eid[input_id]` and fail without input ids, so a PoC forward of
`deepseek_v4` passes ids beside the embeddings: `ids[n, t] = murmur(t, seed(f"{BH}_{PK}_nonce{N}_input_ids")) %
vocab_size` for t = 0..S-1, int32, nonce-major, flattened to [B*S]. Every other model gets none. The spec's frozen
reference vectors ("convention v1") are in tests/unit/consensus/test_pseudo_input_ids.py.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ._validate import require_int_at_least
from .murmur import murmur3_32, seeds_tensor
from .seeds import input_ids_seed


def pseudo_input_ids(
    block_hash: str,
    public_key: str,
    nonces: Sequence[int],
    seq_len: int,
    vocab_size: int,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """int32 [len(nonces) * seq_len]: each nonce's seq_len ids in [0, vocab_size), nonce-major."""
    require_int_at_least("seq_len", seq_len, 1)
    require_int_at_least("vocab_size", vocab_size, 1)
    seeds = seeds_tensor([input_ids_seed(block_hash, public_key, nonce) for nonce in nonces], device)
    hashes = murmur3_32(torch.arange(seq_len, dtype=torch.int64, device=seeds.device), seeds.unsqueeze(1))
    return (hashes % vocab_size).to(torch.int32).reshape(-1)
