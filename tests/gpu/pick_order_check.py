"""The spec's pick order against CUDA's own `torch.topk(-score, k, sorted=False)`, which the network's nodes call
(poc-v2.md section 5.4; poc-v2-models.md 7.3 notes it was checked only on the Qwen setup).

engine_ext.consensus.head.pick_indices builds the order explicitly (the k-1 smallest scores in ascending index order,
then the k-th smallest) so that every device gives it. Here, on a CUDA device, the same scores (murmur of each hidden
index under each nonce's pick seed, computed on the device) go through CUDA's unsorted topk in batches of the PoC's
sizes, and every row is compared with the explicit order. Prints the rows that differ per hidden size and batch;
asserts nothing (a check that prints). Usage, on a GPU host:

    python3 tests/gpu/pick_order_check.py --hidden 3072 4096 --batches 16 32 --nonces 10240
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from engine_ext.consensus.head import pick_indices
from engine_ext.consensus.murmur import murmur3_32, seeds_tensor
from engine_ext.consensus.seeds import pick_seed

BLOCK_HASH = "0x" + "ab" * 32
PUBLIC_KEY = "pick-order-check"
K = 12


def native_order(nonces: list[int], hidden: int, device: torch.device) -> torch.Tensor:
    """[B, K]: CUDA's unsorted top-k of the negated scores, as the deployed nodes take it."""
    seeds = seeds_tensor([pick_seed(BLOCK_HASH, PUBLIC_KEY, n, K) for n in nonces], device)
    scores = murmur3_32(torch.arange(hidden, dtype=torch.int64, device=device), seeds.unsqueeze(1))
    return torch.topk(-scores, K, dim=1, sorted=False).indices


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hidden", type=int, nargs="+", default=[3072, 4096])
    parser.add_argument("--batches", type=int, nargs="+", default=[16, 32])
    parser.add_argument("--nonces", type=int, default=10240, help="nonces per hidden size and batch")
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    print(f"device: {torch.cuda.get_device_name() if device.type == 'cuda' else 'cpu (not the check: run it on CUDA)'}")
    print(f"torch {torch.__version__}")
    for hidden in args.hidden:
        for batch in args.batches:
            differing = 0
            for start in range(0, args.nonces, batch):
                nonces = list(range(start, min(start + batch, args.nonces)))
                explicit = pick_indices(BLOCK_HASH, PUBLIC_KEY, nonces, hidden, K, device=device)
                differing += int((native_order(nonces, hidden, device) != explicit).any(dim=1).sum())
            print(
                f"hidden {hidden}, batch {batch}: {args.nonces} nonces, {differing} rows in another order", flush=True
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
