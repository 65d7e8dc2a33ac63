"""The PoC output head for a batch (poc-v2.md section 5): [B, H] last hidden states -> [B, k] float16.

Steps per nonce: h = last hidden (float32); h / (||h|| + 1e-8); pick k coordinates in the network's order; k-1
Householder steps with seeded unit vectors; y / (||y|| + 1e-8); float16. Every reduction is a fixed pairwise sum (see
reductions), so a nonce's vector does not depend on the batch it was computed in.

A nonce whose last hidden row holds NaN or inf, or whose vector would be non-finite or all zero, has no artifact;
the other nonces of its batch keep theirs (poc-v2-models.md section 5, which supersedes poc-v2.md's whole-batch rule):
each nonce gets a `HeadOutcome`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum

import torch

from ._validate import require_int
from .murmur import murmur3_32, seeds_tensor
from .reductions import pairwise_norm, pairwise_sum
from .rng import Backend, normal_rows
from .seeds import pick_seed, rotation_seeds

DEFAULT_K = 12
_NORM_EPS = 1e-8
_ROTATION_EPS = 1e-30


class HeadOutcome(IntEnum):
    """Whether a nonce's vector is an artifact, and why not (poc-v2-models.md section 5)."""

    COMPUTED = 0
    # Its last hidden row (after the final norm) holds NaN or inf.
    NON_FINITE_HIDDEN = 1
    # Its hidden row is finite, but the vector would not be (a norm overflowing float32).
    NON_FINITE_VECTOR = 2
    # Its vector would be all zero (an all-zero hidden row).
    ZERO_VECTOR = 3


class UncomputedNonceError(ValueError):
    """Some nonces of a batch have no artifact (head_vectors, planned_head_vectors); the others are fine."""

    def __init__(self, nonces: Sequence[int], outcomes: Sequence[HeadOutcome]) -> None:
        self.outcomes = {nonce: outcome for nonce, outcome in zip(nonces, outcomes) if outcome != HeadOutcome.COMPUTED}
        named = ", ".join(f"{nonce}: {outcome.name}" for nonce, outcome in self.outcomes.items())
        super().__init__(f"no artifact for {len(self.outcomes)} of {len(nonces)} nonces ({named})")


def check_k(k: int, hidden: int) -> int:
    """k must be in [2, hidden]: one pick ordering needs k-1 >= 1 sorted entries plus the k-th."""
    require_int("k", k)
    if not 2 <= k <= hidden:
        raise ValueError(f"k (k_dim) must be in [2, hidden={hidden}], got {k}")
    return k


def pick_indices(
    block_hash: str,
    public_key: str,
    nonces: Sequence[int],
    hidden: int,
    k: int = DEFAULT_K,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """[B, k] int64 coordinates in the network's order.

    score[i] = murmur(i, pick seed), i < hidden (distinct: murmur is a bijection of the key). The k
    smallest scores are taken; the k-1 smallest come in ascending INDEX order and the k-th smallest
    last. That is what CUDA topk(-score, k, sorted=False) returns on the deployed network; it is built
    explicitly here so every device gives it.
    """
    check_k(k, hidden)
    seeds = seeds_tensor([pick_seed(block_hash, public_key, n, k) for n in nonces], device)
    scores = murmur3_32(torch.arange(hidden, dtype=torch.int64, device=seeds.device), seeds.unsqueeze(1))
    by_score = torch.topk(scores, k, dim=1, largest=False, sorted=True).indices
    first = torch.sort(by_score[:, : k - 1], dim=1).values
    return torch.cat((first, by_score[:, k - 1 :]), dim=1)


def rotation_vectors(
    block_hash: str,
    public_key: str,
    nonces: Sequence[int],
    k: int = DEFAULT_K,
    device: torch.device | str | None = None,
    backend: Backend = "auto",
) -> torch.Tensor:
    """[B, k-1, k] float32: step j's vector normal(seed_j, k) / (||.|| + 1e-30) for every nonce."""
    require_int("k", k)
    if k < 2:
        raise ValueError(f"k (k_dim) must be >= 2, got {k}")
    seeds = [s for n in nonces for s in rotation_seeds(block_hash, public_key, n, k)]
    w = normal_rows(seeds, k, device=device, backend=backend).view(len(nonces), k - 1, k)
    return w / (pairwise_norm(w) + _ROTATION_EPS).unsqueeze(-1)


def rotate(x: torch.Tensor, vectors: torch.Tensor) -> torch.Tensor:
    """Apply x <- x - 2 (x.w_j) w_j for j = 0..k-2 in order; x [B, k], vectors [B, k-1, k]; float32."""
    if x.dim() != 2 or vectors.shape != (x.shape[0], x.shape[1] - 1, x.shape[1]):
        raise ValueError(f"rotation of x {tuple(x.shape)} needs vectors [B, k-1, k], got {tuple(vectors.shape)}")
    x = x.to(torch.float32)
    for j in range(vectors.shape[1]):
        w = vectors[:, j]
        x = x - (2.0 * pairwise_sum(x * w)).unsqueeze(-1) * w
    return x


@dataclass(frozen=True)
class HeadPlan:
    """The part of a batch's head that depends only on who mines what (block hash, public key, nonces) and the
    model's width, not on the hidden states: each nonce's picked coordinates and rotation vectors. A prover can
    make it while the batch's forward runs."""

    nonces: tuple[int, ...]
    hidden: int
    indices: torch.Tensor  # [B, k] int64, pick_indices
    rotations: torch.Tensor  # [B, k-1, k] float32, rotation_vectors


def head_plan(
    block_hash: str,
    public_key: str,
    nonces: Sequence[int],
    hidden: int,
    k: int = DEFAULT_K,
    device: torch.device | str | None = None,
    backend: Backend = "auto",
) -> HeadPlan:
    """The head plan of these nonces for a model `hidden` wide (pick_indices checks k against it)."""
    return HeadPlan(
        tuple(nonces),
        hidden,
        pick_indices(block_hash, public_key, nonces, hidden, k, device=device),
        rotation_vectors(block_hash, public_key, nonces, k, device=device, backend=backend),
    )


def planned_head_vectors(last_hidden: torch.Tensor, plan: HeadPlan) -> torch.Tensor:
    """head_vectors with the plan of the same nonces, made beforehand (head_plan) on last_hidden's device."""
    vectors, outcomes = unchecked_head_vectors(last_hidden, plan)
    read = head_outcomes(outcomes)
    if any(outcome != HeadOutcome.COMPUTED for outcome in read):
        raise UncomputedNonceError(plan.nonces, read)
    return vectors


def unchecked_head_vectors(last_hidden: torch.Tensor, plan: HeadPlan) -> tuple[torch.Tensor, torch.Tensor]:
    """planned_head_vectors without reading anything back from last_hidden's device: the [B, k] float16 vectors
    and each nonce's HeadOutcome as an int8 [B] tensor. On a GPU its kernels queue behind whatever computes
    last_hidden, so a prover can launch the head with its forward. A vector is an artifact only where its outcome
    is COMPUTED (head_outcomes reads them); the others are zeros."""
    if last_hidden.dim() != 2:
        raise ValueError(f"last_hidden must be [batch, hidden], got shape {tuple(last_hidden.shape)}")
    batch, hidden = last_hidden.shape
    if batch != len(plan.nonces):
        raise ValueError(f"last_hidden has {batch} rows but {len(plan.nonces)} nonces were given")
    if hidden != plan.hidden:
        raise ValueError(f"last_hidden is {hidden} wide but the head plan was made for {plan.hidden}")
    h = last_hidden.to(torch.float32)
    x = torch.gather(h, 1, plan.indices) / (pairwise_norm(h) + _NORM_EPS).unsqueeze(-1)
    x = rotate(x, plan.rotations)
    vectors = (x / (pairwise_norm(x) + _NORM_EPS).unsqueeze(-1)).to(torch.float16)
    outcomes = torch.full((batch,), HeadOutcome.COMPUTED, dtype=torch.int8, device=h.device)
    outcomes = torch.where((vectors == 0).all(dim=1), HeadOutcome.ZERO_VECTOR, outcomes)
    outcomes = torch.where(torch.isfinite(vectors).all(dim=1), outcomes, HeadOutcome.NON_FINITE_VECTOR)
    outcomes = torch.where(torch.isfinite(h).all(dim=1), outcomes, HeadOutcome.NON_FINITE_HIDDEN)
    return torch.where((outcomes == HeadOutcome.COMPUTED).unsqueeze(1), vectors, 0.0), outcomes.to(torch.int8)


def head_outcomes(outcomes: torch.Tensor) -> list[HeadOutcome]:
    """unchecked_head_vectors' outcomes, read back (on a GPU this waits for the head)."""
    return [HeadOutcome(int(value)) for value in outcomes.cpu().tolist()]


def head_vectors(
    last_hidden: torch.Tensor,
    block_hash: str,
    public_key: str,
    nonces: Sequence[int],
    k: int = DEFAULT_K,
    backend: Backend = "auto",
) -> torch.Tensor:
    """[B, H] last-token hidden states after the final norm -> [B, k] float16 artifact vectors.

    Raises UncomputedNonceError if any nonce has no artifact (unchecked_head_vectors gives the others).
    """
    if last_hidden.dim() != 2:
        raise ValueError(f"last_hidden must be [batch, hidden], got shape {tuple(last_hidden.shape)}")
    plan = head_plan(
        block_hash, public_key, nonces, last_hidden.shape[1], k, device=last_hidden.device, backend=backend
    )
    return planned_head_vectors(last_hidden, plan)
