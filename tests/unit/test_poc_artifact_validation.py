"""ValidatePocArtifacts where issue 30's per-nonce outcomes meet issue 31's instances: the batches spread over two
instances, a nonce the engine reports without an artifact (poc-v2-models.md section 5) is not computable and hides no
other claim of its batch, and PoC off refuses the call. Stand-in engines (a real one cannot be made to overflow on
chosen nonces; tests/e2e/test_validation_failures.py does that through the test engine-fault plugin)."""

from __future__ import annotations

import asyncio
import math

import grpc
import numpy as np
import pytest

from engine_ext.consensus import HeadOutcome
from engine_ext.engine_calls import EngineCalls
from engine_ext.poc.batch import BATCH_OK, PocBatch, PocBatchResult
from gonka.mlnode.v1 import poc_pb2
from gonka.mlnode.v1 import validation_pb2 as vpb
from server.core.errors import Reason, ServiceError
from server.core.instances import EngineInstance
from server.poc.batches.batch_runner import PocBatchRunner
from server.poc.batches.round_params import PocLimits
from server.poc.validation.artifact_validation import validate_poc_artifacts

K = 4
MODEL = "stand-in"
LIMITS = PocLimits(MODEL, max_model_len=64, hidden_size=16, max_num_batched_tokens=4096, max_num_seqs=64)
FAILING = {3: HeadOutcome.NON_FINITE_HIDDEN, 10: HeadOutcome.ZERO_VECTOR}
TAMPERED = 6


def vector_of(nonce: int) -> np.ndarray:
    return np.array([nonce, 1, 2, 3], dtype="<f2")


class OutcomeEngine:
    """Computes each nonce's vector as vector_of(nonce), except FAILING nonces, which have no artifact."""

    def __init__(self) -> None:
        self.batches: list[tuple[int, ...]] = []
        self.errored = False
        self.calls = EngineCalls(30, 120)

    async def poc_forward(self, batch: PocBatch) -> PocBatchResult:
        await asyncio.sleep(0.001)
        self.batches.append(batch.nonces)
        outcomes = [FAILING.get(nonce, HeadOutcome.COMPUTED) for nonce in batch.nonces]
        rows = [
            vector_of(nonce) if outcome == HeadOutcome.COMPUTED else np.zeros(K, dtype="<f2")
            for nonce, outcome in zip(batch.nonces, outcomes)
        ]
        return PocBatchResult(BATCH_OK, vectors=np.stack(rows).tobytes(), outcomes=[int(o) for o in outcomes])


def request(nonces: list[int]) -> vpb.ValidatePocArtifactsRequest:
    claims = [
        vpb.ClaimedArtifact(nonce=nonce, vector_f16=(vector_of(nonce) + (5 if nonce == TAMPERED else 0)).tobytes())
        for nonce in nonces
    ]
    return vpb.ValidatePocArtifactsRequest(
        block_hash="bh",
        public_key="pk",
        params=poc_pb2.PocParams(model=MODEL, seq_len=8, k_dim=K),
        artifacts=claims,
        stat_test=vpb.PocStatTest(dist_threshold=0.1, p_mismatch=0.1, p_value_threshold=0.05),
        batch_size=4,
    )


def responses(
    call: vpb.ValidatePocArtifactsRequest, engines: list[OutcomeEngine], limits: PocLimits = LIMITS
) -> list[vpb.ValidatePocArtifactsResponse]:
    instances = [
        EngineInstance(index, engine, PocBatchRunner(engine), alone=False) for index, engine in enumerate(engines)
    ]

    async def read() -> list[vpb.ValidatePocArtifactsResponse]:
        return [response async for response in validate_poc_artifacts(call, instances, limits, lambda url, body: None)]

    return asyncio.run(read())


def test_a_nonce_without_an_artifact_is_not_computable_and_hides_no_other_claim_on_either_instance() -> None:
    engines = [OutcomeEngine(), OutcomeEngine()]
    nonces = list(range(16))
    got = responses(request([*nonces, 3, TAMPERED]), engines)  # 3 and the tampered nonce claimed twice
    progress = [response.progress for response in got[:-1]]
    summary = got[-1].summary
    assert engines[0].batches and engines[1].batches  # both instances computed batches
    judged = {
        nonce: (distance, mismatch, computed)
        for message in progress
        for nonce, distance, mismatch, computed in zip(
            message.nonces, message.distances, message.mismatches, message.computed
        )
    }
    assert [nonce for message in progress for nonce in message.nonces] == nonces  # every claim once, in order
    for nonce in FAILING:
        distance, mismatch, computed = judged[nonce]
        assert math.isnan(distance) and not mismatch and not computed
    assert judged[TAMPERED][1] and judged[TAMPERED][2]
    assert all(
        judged[nonce][0] == 0.0 and not judged[nonce][1] and judged[nonce][2]
        for nonce in nonces
        if nonce not in FAILING and nonce != TAMPERED
    )
    assert (summary.n_total, summary.n_mismatch, summary.n_not_computable) == (16, 1, 2)
    assert list(summary.mismatch_nonces) == [TAMPERED] and list(summary.duplicate_nonces) == [3, TAMPERED]
    # Nothing was computed twice: the engine's per-nonce outcomes need no splitting of a batch.
    assert sorted(n for engine in engines for batch in engine.batches for n in batch) == nonces


def test_poc_off_refuses_the_call_before_any_batch() -> None:
    engine = OutcomeEngine()
    off = PocLimits(MODEL, 64, 16, 4096, 64, enabled=False)
    with pytest.raises(ServiceError) as refused:
        responses(request([1, 2]), [engine], off)
    assert refused.value.code == grpc.StatusCode.FAILED_PRECONDITION and refused.value.reason == Reason.POC_DISABLED
    assert engine.batches == []
