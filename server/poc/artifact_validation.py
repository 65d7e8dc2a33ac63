"""ValidationService.ValidatePocArtifacts: recompute a prover's claimed artifacts and judge them
(poc-v2.md section 7), batch by batch, spread over the engine instances (server.poc.spread), each on KV
blocks borrowed from its own engine beside its live inference; the progress comes in the claims' order.

Every distinct nonce claimed gets its own verdict: recomputed as given (any int64), judged once
however often it is claimed, and a batch the engine rejects as non-finite is split, on the instance that
ran it, until its non-finite nonces stand alone (poc-v2-models.md section 5: such nonces are dropped one by one).
"""

from __future__ import annotations

import base64
import math
from collections.abc import AsyncGenerator, Callable, Sequence
from contextlib import aclosing

import numpy as np

from engine_ext.consensus import check_claimed_vector, fraud_test
from engine_ext.poc.batch import BATCH_NON_FINITE
from gonka.mlnode.v1 import validation_pb2 as vpb
from server.errors import invalid_field
from server.instances import EngineInstance
from server.poc.batch_runner import KvBlockNotes, PocBatchRunner
from server.poc.round_params import ArtifactParams, PocLimits, artifact_params, batch_size_of, callback_url_of
from server.poc.spread import Pieces, spread_batches

MAX_CLAIMS = 100_000
# Where a claim could not be judged by distance (undecodable, non-finite, or not computed here).
NO_DISTANCE = math.nan

# (url, body) -> delivery of the summary to {callback_url}/validated, owned by the caller.
ValidatedCallback = Callable[[str, dict], None]


async def validate_poc_artifacts(
    request: vpb.ValidatePocArtifactsRequest,
    instances: Sequence[EngineInstance],
    limits: PocLimits,
    deliver: ValidatedCallback,
) -> AsyncGenerator[vpb.ValidatePocArtifactsResponse, None]:
    """`instances`: those the batches are spread over."""
    params = artifact_params(request.block_hash, request.public_key, request, request.stronger_rng, limits)
    batch_size = batch_size_of(request, params.seq_len, limits)
    dist_threshold, p_mismatch, p_value_threshold = _stat_test(request)
    callback_url = callback_url_of(request.callback_url)
    claims, duplicates = _first_claims(list(request.artifacts))

    notes = KvBlockNotes()
    checked = mismatched = not_computable = 0
    mismatch_nonces: list[int] = []
    chunks = [claims[start : start + batch_size] for start in range(0, len(claims), batch_size)]
    batches = [[claim.nonce for claim in chunk] for chunk in chunks]
    async with aclosing(spread_batches(instances, params, batches, notes)) as computed:
        index = 0
        async for instance, pieces_of_chunk in computed:
            chunk = chunks[index]
            index += 1
            for nonces, result in await _isolating_non_finite(instance.runner, params, pieces_of_chunk, notes):
                pieces = [_claim_of(chunk, nonce) for nonce in nonces]
                if result.status == BATCH_NON_FINITE:
                    # Not computable here (each such nonce stands alone by now): counted in n_total, never as a
                    # mismatch (spec section 7).
                    distances = [NO_DISTANCE] * len(pieces)
                    flags = [False] * len(pieces)
                    not_computable += len(pieces)
                else:
                    computed_vectors = np.frombuffer(result.vectors, dtype="<f2").reshape(len(nonces), params.k_dim)
                    verdicts = [
                        check_claimed_vector(computed_vectors[i], _claimed_b64(claim), dist_threshold)
                        for i, claim in enumerate(pieces)
                    ]
                    distances = [NO_DISTANCE if v.distance is None else float(v.distance) for v in verdicts]
                    flags = [v.mismatch for v in verdicts]
                checked += len(pieces)
                mismatched += sum(flags)
                mismatch_nonces += [claim.nonce for claim, flag in zip(pieces, flags) if flag]
                yield vpb.ValidatePocArtifactsResponse(
                    progress=vpb.PocValidationProgress(
                        nonces=nonces,
                        distances=distances,
                        mismatches=flags,
                        nonces_checked=checked,
                        mismatches_so_far=mismatched,
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
        duplicate_nonces=duplicates,
        n_not_computable=not_computable,
    )
    if callback_url:
        deliver(callback_url, _validated_body(request, summary))
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


async def _isolating_non_finite(
    runner: PocBatchRunner, params: ArtifactParams, pieces: Pieces, notes: KvBlockNotes
) -> Pieces:
    """`pieces`, a batch that came back non-finite run again in halves on `runner` until each non-finite
    nonce stands alone: the engine rejects a whole batch for one non-finite row, which must not hide the
    other claims of that batch from judgement."""
    results: Pieces = []
    for ran, result in pieces:
        if result.status == BATCH_NON_FINITE and len(ran) > 1:
            half = len(ran) // 2
            for part in (ran[:half], ran[half:]):
                results += await _isolating_non_finite(runner, params, await runner.run(params, part, notes), notes)
        else:
            results.append((ran, result))
    return results


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
