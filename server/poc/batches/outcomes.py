"""A computed PoC batch split by its nonces' outcomes (poc-v2-models.md section 5): the nonces with an artifact and
their vectors, and the nonces without one. A non-finite or all-zero vector is never an artifact, and its batch's
other nonces keep theirs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from engine_ext.consensus import HeadOutcome
from engine_ext.poc.batch import PocBatchResult
from gonka.mlnode.v1 import poc_pb2
from server.poc.batches.artifacts import NonceFailure

# The wire's reason for each outcome without an artifact.
NONCE_ERROR_REASONS = {
    HeadOutcome.NON_FINITE_HIDDEN: poc_pb2.NONCE_ERROR_REASON_NON_FINITE_HIDDEN,
    HeadOutcome.NON_FINITE_VECTOR: poc_pb2.NONCE_ERROR_REASON_NON_FINITE_VECTOR,
    HeadOutcome.ZERO_VECTOR: poc_pb2.NONCE_ERROR_REASON_ZERO_VECTOR,
}
DETAILS = {
    HeadOutcome.NON_FINITE_HIDDEN: "the last hidden state holds NaN or inf",
    HeadOutcome.NON_FINITE_VECTOR: "the vector would not be finite",
    HeadOutcome.ZERO_VECTOR: "the vector would be all zero",
}


@dataclass(frozen=True)
class SplitBatch:
    nonces: list[int]
    # len(nonces) x k float16, little-endian, row-major.
    vectors: bytes
    failures: list[NonceFailure]
    # Per nonce of the batch, in its order: its float16 [k] vector, or None without an artifact.
    rows: list[np.ndarray | None]


def split_outcomes(nonces: Sequence[int], result: PocBatchResult, k_dim: int) -> SplitBatch:
    vectors = np.frombuffer(result.vectors, dtype="<f2").reshape(len(nonces), k_dim)
    outcomes = [HeadOutcome(value) for value in result.outcomes]
    if len(outcomes) != len(nonces):
        raise RuntimeError(f"the worker reported {len(outcomes)} outcomes for a batch of {len(nonces)} nonces")
    kept = [index for index, outcome in enumerate(outcomes) if outcome == HeadOutcome.COMPUTED]
    return SplitBatch(
        nonces=[nonces[index] for index in kept],
        vectors=vectors[kept].tobytes(),
        failures=[
            NonceFailure(nonce, outcome) for nonce, outcome in zip(nonces, outcomes) if outcome != HeadOutcome.COMPUTED
        ],
        rows=[
            vectors[index].astype(np.float16) if outcome == HeadOutcome.COMPUTED else None
            for index, outcome in enumerate(outcomes)
        ],
    )


def nonce_errors(failures: Sequence[NonceFailure]) -> list[poc_pb2.NonceError]:
    return [
        poc_pb2.NonceError(
            nonce=failure.nonce, reason=NONCE_ERROR_REASONS[failure.outcome], detail=DETAILS[failure.outcome]
        )
        for failure in failures
    ]


def artifact_batch_message(
    sequence: int,
    nonces: Sequence[int],
    vectors: bytes,
    k_dim: int,
    failures: Sequence[NonceFailure],
    *,
    group_id: int = 0,
    instance: int = 0,
) -> poc_pb2.ArtifactBatch:
    return poc_pb2.ArtifactBatch(
        sequence=sequence,
        nonces=nonces,
        vectors=vectors,
        k_dim=k_dim,
        group_id=group_id,
        instance=instance,
        nonce_errors=nonce_errors(failures),
    )
