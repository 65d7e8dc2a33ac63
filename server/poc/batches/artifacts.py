"""One batch of a round's artifacts: nonces and their float16 vectors, as the hub numbers and fans them out, and the
batch's nonces that have none (poc-v2-models.md section 5)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypedDict

import numpy as np

from engine_ext.consensus import HeadOutcome
from engine_ext.consensus.artifact import encode_vector

_LE_F16 = np.dtype("<f2")


@dataclass(frozen=True)
class NonceFailure:
    """A nonce of a batch without an artifact, and why (never COMPUTED)."""

    nonce: int
    outcome: HeadOutcome


@dataclass(frozen=True)
class ArtifactBatch:
    """`vectors` holds len(nonces) * k_dim float16 values, little-endian, row-major: row i is nonce i's vector.

    Kept as raw bytes rather than an array: the gRPC stream sends them as they are, and only the HTTP
    callback needs the per-row base64 form. `failures`: the batch's other nonces, which have no artifact.
    """

    sequence: int  # 1-based, dense per round, assigned by the hub
    nonces: tuple[int, ...]
    vectors: bytes
    k_dim: int
    # The nonce group and the engine instance that computed the batch (server.poc.round.mining_round).
    group_id: int = 0
    instance: int = 0
    failures: tuple[NonceFailure, ...] = ()

    def __post_init__(self) -> None:
        if self.sequence < 1:
            raise ValueError(f"sequence must be >= 1, got {self.sequence}")
        if self.k_dim < 1:
            raise ValueError(f"k_dim must be >= 1, got {self.k_dim}")
        if not self.nonces and not self.failures:
            raise ValueError("an artifact batch holds at least one nonce")
        expected = len(self.nonces) * self.k_dim * _LE_F16.itemsize
        if len(self.vectors) != expected:
            raise ValueError(
                f"vectors hold {len(self.vectors)} bytes, expected {expected} "
                f"({len(self.nonces)} nonces x k_dim {self.k_dim} float16 values)"
            )

    def __len__(self) -> int:
        return len(self.nonces)

    def vector_b64(self, index: int) -> str:
        """Row `index` in the network's artifact encoding (standard base64 of 2k little-endian bytes)."""
        return vector_b64(self.vectors, self.k_dim, index)


class ArtifactEntry(TypedDict):
    """One artifact as the deployed JSON bodies list it, in this key order."""

    nonce: int
    vector_b64: str


def artifact_entries(nonces: Sequence[int], vectors: bytes, k_dim: int) -> list[ArtifactEntry]:
    """The nonces and their vectors as the deployed JSON bodies list them: `[{nonce, vector_b64}]`."""
    return [
        {"nonce": int(nonce), "vector_b64": vector_b64(vectors, k_dim, index)} for index, nonce in enumerate(nonces)
    ]


def vector_b64(vectors: bytes, k_dim: int, index: int) -> str:
    """Row `index` of `vectors` (rows of k_dim little-endian float16 values) in the network's artifact encoding."""
    if not 0 <= index < len(vectors) // (k_dim * _LE_F16.itemsize):
        raise IndexError(f"artifact index {index} outside the {len(vectors) // (k_dim * _LE_F16.itemsize)} rows")
    row = np.frombuffer(vectors, dtype=_LE_F16, count=k_dim, offset=index * k_dim * _LE_F16.itemsize)
    # The consensus codec is the one validators decode with; going through it keeps the two in step.
    return encode_vector(row.astype(np.float16))
