"""ValidationService.ValidatePocArtifacts: recompute a prover's claimed artifacts and judge them
(poc-v2.md section 7), batch by batch, spread over the engine instances (server.poc.batches.spread), each on KV
blocks borrowed from its own engine beside its live inference; the progress comes in the claims' order.

Every distinct nonce claimed gets its own verdict: recomputed as given (any int64) and judged once however
often it is claimed. The engine reports each nonce's outcome (poc-v2-models.md section 5: a nonce whose last
hidden state or vector is not finite, or whose vector is all zero, has no artifact): such a nonce is not
computable here and hides no other claim of its batch.
"""

from __future__ import annotations

import base64
import math
from collections.abc import AsyncGenerator, Callable, Sequence
from contextlib import aclosing
from dataclasses import dataclass

from engine_ext.consensus import check_claimed_vector, fraud_test
from gonka.mlnode.v1 import validation_pb2 as vpb
from server.core.errors import invalid_field
from server.core.instances import EngineInstance
from server.poc.batches.batch_runner import KvBlockNotes
from server.poc.batches.outcomes import split_outcomes
from server.poc.batches.round_params import (
    ArtifactParams,
    PocLimits,
    artifact_params,
    batch_size_of,
    callback_url_of,
    require_poc_enabled,
)
from server.poc.batches.spread import spread_batches
from server.poc.delivery.validated import ValidatedBody

MAX_CLAIMS = 100_000
# Where a claim could not be judged by distance (undecodable, non-finite, or not computed here).
NO_DISTANCE = math.nan

# (url, body) -> delivery of the summary to {callback_url}/validated, owned by the caller.
ValidatedCallback = Callable[[str, ValidatedBody], None]


@dataclass(frozen=True)
class PocValidationPlan:
    """A ValidatePocArtifactsRequest checked: what its recomputation and verdict need."""

    params: ArtifactParams
    batch_size: int
    dist_threshold: float
    p_mismatch: float
    p_value_threshold: float
    callback_url: str
    # Each nonce's first claim, in request order, and the nonces claimed again.
    claims: list[vpb.ClaimedArtifact]
    duplicates: list[int]


def poc_validation_plan(request: vpb.ValidatePocArtifactsRequest, limits: PocLimits) -> PocValidationPlan:
    """The request's checks (a ServiceError names the offending field), before any engine work."""
    require_poc_enabled(limits)
    params = artifact_params(request.block_hash, request.public_key, request, request.stronger_rng, limits)
    batch_size = batch_size_of(request, params.seq_len, limits)
    dist_threshold, p_mismatch, p_value_threshold = _stat_test(request)
    callback_url = callback_url_of(request.callback_url)
    claims, duplicates = _first_claims(list(request.artifacts))
    return PocValidationPlan(
        params, batch_size, dist_threshold, p_mismatch, p_value_threshold, callback_url, claims, duplicates
    )


async def validate_poc_artifacts(
    request: vpb.ValidatePocArtifactsRequest,
    instances: Sequence[EngineInstance],
    limits: PocLimits,
    deliver: ValidatedCallback,
) -> AsyncGenerator[vpb.ValidatePocArtifactsResponse, None]:
    """`instances`: those the batches are spread over."""
    plan = poc_validation_plan(request, limits)
    params, batch_size, claims = plan.params, plan.batch_size, plan.claims
    dist_threshold, p_mismatch, p_value_threshold = plan.dist_threshold, plan.p_mismatch, plan.p_value_threshold

    notes = KvBlockNotes()
    checked = mismatched = not_computable = 0
    mismatch_nonces: list[int] = []
    chunks = [claims[start : start + batch_size] for start in range(0, len(claims), batch_size)]
    batches = [[claim.nonce for claim in chunk] for chunk in chunks]
    async with aclosing(spread_batches(instances, params, batches, notes)) as spread:
        index = 0
        async for _instance, pieces_of_chunk in spread:
            chunk = chunks[index]
            index += 1
            for nonces, result in pieces_of_chunk:
                pieces = [_claim_of(chunk, nonce) for nonce in nonces]
                rows = split_outcomes(nonces, result, params.k_dim).rows
                distances, flags = [], []
                for claim, row in zip(pieces, rows):
                    if row is None:
                        # Not computable here: counted in n_total, never as a mismatch (spec section 7).
                        distances.append(NO_DISTANCE)
                        flags.append(False)
                        continue
                    check = check_claimed_vector(row, _claimed_b64(claim), dist_threshold)
                    distances.append(NO_DISTANCE if check.distance is None else float(check.distance))
                    flags.append(check.mismatch)
                computed = [row is not None for row in rows]
                checked += len(pieces)
                not_computable += computed.count(False)
                mismatched += sum(flags)
                mismatch_nonces += [claim.nonce for claim, flag in zip(pieces, flags) if flag]
                yield vpb.ValidatePocArtifactsResponse(
                    progress=vpb.PocValidationProgress(
                        nonces=nonces,
                        distances=distances,
                        mismatches=flags,
                        nonces_checked=checked,
                        mismatches_so_far=mismatched,
                        computed=computed,
                    )
                )
    verdict = fraud_test(mismatched, checked, p_mismatch, p_value_threshold)
    summary = vpb.PocValidationSummary(
        n_total=checked,
        n_mismatch=mismatched,
        mismatch_nonces=mismatch_nonces,
        p_value=verdict.p_value,
        fraud_detected=verdict.fraud_detected,
        kv_blocks_note=notes.describe(),
        duplicate_nonces=plan.duplicates,
        n_not_computable=not_computable,
    )
    if plan.callback_url:
        deliver(plan.callback_url, validated_body(request, summary))
    yield vpb.ValidatePocArtifactsResponse(summary=summary)


def _first_claims(claims: list[vpb.ClaimedArtifact]) -> tuple[list[vpb.ClaimedArtifact], list[int]]:
    """Each nonce's first claim, in request order, and the nonces claimed again (each once, in the order of
    their second claim). Nonces are recomputed as given: nothing about one claim refuses the call."""
    if not claims:
        raise invalid_field("artifacts", "must hold at least one claim")
    if len(claims) > MAX_CLAIMS:
        raise invalid_field("artifacts", f"at most {MAX_CLAIMS} per call, got {len(claims)}")
    first: dict[int, vpb.ClaimedArtifact] = {}
    duplicates: dict[int, None] = {}
    for claim in claims:
        if claim.nonce in first:
            duplicates[claim.nonce] = None
        else:
            first[claim.nonce] = claim
    return list(first.values()), list(duplicates)


def _claim_of(chunk: list[vpb.ClaimedArtifact], nonce: int) -> vpb.ClaimedArtifact:
    return next(claim for claim in chunk if claim.nonce == nonce)


def _stat_test(request: vpb.ValidatePocArtifactsRequest) -> tuple[float, float, float]:
    if not request.HasField("stat_test"):
        raise invalid_field(
            "stat_test", "is required (dist_threshold, p_mismatch, p_value_threshold): no silent defaults"
        )
    test = request.stat_test
    for name in ("dist_threshold", "p_mismatch", "p_value_threshold"):
        if not test.HasField(name):
            raise invalid_field(f"stat_test.{name}", "is required")
        if not math.isfinite(getattr(test, name)):
            raise invalid_field(f"stat_test.{name}", f"must be finite, got {getattr(test, name)}")
    if test.dist_threshold < 0:
        raise invalid_field("stat_test.dist_threshold", f"must be >= 0, got {test.dist_threshold}")
    if not 0.0 < test.p_mismatch < 1.0:
        raise invalid_field("stat_test.p_mismatch", f"must be in (0, 1), got {test.p_mismatch}")
    if not 0.0 < test.p_value_threshold <= 1.0:
        raise invalid_field("stat_test.p_value_threshold", f"must be in (0, 1], got {test.p_value_threshold}")
    return test.dist_threshold, test.p_mismatch, test.p_value_threshold


def _claimed_b64(claim: vpb.ClaimedArtifact) -> str:
    """Both claim forms go through the one decoder validators use (a wrong length is a mismatch)."""
    if claim.WhichOneof("vector") == "vector_f16":
        return base64.b64encode(claim.vector_f16).decode("ascii")
    return claim.vector_b64


def validated_body(request: vpb.ValidatePocArtifactsRequest, summary: vpb.PocValidationSummary) -> ValidatedBody:
    """The deployed server's body for {url}/validated (gonka-network.md)."""
    return {
        "request_id": request.request_id,
        "block_hash": request.block_hash,
        "block_height": request.block_height,
        "public_key": request.public_key,
        "node_id": request.node_id,
        "n_total": summary.n_total,
        "n_mismatch": summary.n_mismatch,
        "mismatch_nonces": list(summary.mismatch_nonces),
        "p_value": summary.p_value,
        "fraud_detected": summary.fraud_detected,
    }
