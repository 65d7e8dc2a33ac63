"""ValidationService.ValidatePocArtifacts: recompute a prover's claimed artifacts and judge them
(poc-v2.md section 7), batch by batch, on KV blocks borrowed beside live inference."""

from __future__ import annotations

import base64
import math
from collections.abc import AsyncIterator, Callable

from engine_ext.consensus import check_claimed_vector, fraud_test
from gonka.mlnode.v1 import validation_pb2 as vpb
from server.errors import invalid_field
from server.poc.batch_runner import KvBlockNotes, PocBatchRunner
from server.poc.outcomes import split_outcomes
from server.poc.round_params import (
    PocLimits,
    artifact_params,
    batch_size_of,
    callback_url_of,
    nonce_list,
    require_poc_enabled,
)

MAX_CLAIMS = 100_000
# Where a claim could not be judged by distance (undecodable, non-finite, or not computed here).
NO_DISTANCE = math.nan

# (url, body) -> delivery of the summary to {callback_url}/validated, owned by the caller.
ValidatedCallback = Callable[[str, dict], None]


async def validate_poc_artifacts(
    request: vpb.ValidatePocArtifactsRequest, runner: PocBatchRunner, limits: PocLimits, deliver: ValidatedCallback
) -> AsyncIterator[vpb.ValidatePocArtifactsResponse]:
    require_poc_enabled(limits)
    params = artifact_params(request.block_hash, request.public_key, request, request.stronger_rng, limits)
    batch_size = batch_size_of(request, params.seq_len, limits)
    dist_threshold, p_mismatch, p_value_threshold = _stat_test(request)
    callback_url = callback_url_of(request.callback_url)
    claims = list(request.artifacts)
    nonce_list([claim.nonce for claim in claims], "artifacts", MAX_CLAIMS)

    notes = KvBlockNotes()
    checked = mismatched = not_computed = 0
    mismatch_nonces: list[int] = []
    for start in range(0, len(claims), batch_size):
        chunk = claims[start : start + batch_size]
        by_position = iter(chunk)
        for nonces, result in await runner.run(params, [claim.nonce for claim in chunk], notes):
            pieces = [next(by_position) for _ in nonces]
            distances, flags = [], []
            rows = split_outcomes(nonces, result, params.k_dim).rows
            for claim, row in zip(pieces, rows):
                if row is None:
                    # Not computable here: counted in n_total, never as a mismatch (poc-v2.md section 7).
                    distances.append(NO_DISTANCE)
                    flags.append(False)
                    continue
                verdict = check_claimed_vector(row, _claimed_b64(claim), dist_threshold)
                distances.append(NO_DISTANCE if verdict.distance is None else float(verdict.distance))
                flags.append(verdict.mismatch)
            computed = [row is not None for row in rows]
            checked += len(pieces)
            not_computed += computed.count(False)
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
        n_not_computed=not_computed,
    )
    if callback_url:
        deliver(callback_url, _validated_body(request, summary))
    yield vpb.ValidatePocArtifactsResponse(summary=summary)


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


def _validated_body(request: vpb.ValidatePocArtifactsRequest, summary: vpb.PocValidationSummary) -> dict:
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
