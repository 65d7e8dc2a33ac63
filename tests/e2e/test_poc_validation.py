"""ValidatePocArtifacts against the real engine, and callback delivery to a real HTTP receiver."""

from __future__ import annotations

import base64
import contextlib
import time
from collections.abc import Iterator

import grpc
import numpy as np
import pytest

from engine_ext.consensus import fraud_test
from gonka.mlnode.client import InferenceClient, ServerError
from gonka.mlnode.v1 import poc_pb2, poc_pb2_grpc
from gonka.mlnode.v1 import validation_pb2 as vpb
from gonka.mlnode.v1 import validation_pb2_grpc
from tests.support.http_receiver import HttpReceiver

K = 12
NETWORK_TEST = vpb.PocStatTest(dist_threshold=0.2, p_mismatch=0.1, p_value_threshold=0.05)


@pytest.fixture
def stubs(server) -> Iterator[tuple[poc_pb2_grpc.PocServiceStub, validation_pb2_grpc.ValidationServiceStub]]:
    channel = grpc.insecure_channel(server.target)
    poc = poc_pb2_grpc.PocServiceStub(channel)
    yield poc, validation_pb2_grpc.ValidationServiceStub(channel)
    with contextlib.suppress(grpc.RpcError):
        if poc.GetRoundStatus(poc_pb2.GetRoundStatusRequest()).status.state == poc_pb2.ROUND_STATE_GENERATING:
            poc.StopRound(poc_pb2.StopRoundRequest())
    channel.close()


def params(model: str) -> poc_pb2.PocParams:
    return poc_pb2.PocParams(model=model, seq_len=64)


def computed_artifacts(poc, model: str, nonces: list[int]) -> dict[int, bytes]:
    request = poc_pb2.ComputeArtifactsRequest(
        block_hash="v-block", public_key="v-key", params=params(model), nonces=nonces, batch_size=16
    )
    vectors: dict[int, bytes] = {}
    for message in poc.ComputeArtifacts(request):
        batch = message.batch
        for index, nonce in enumerate(batch.nonces):
            vectors[nonce] = batch.vectors[2 * K * index : 2 * K * (index + 1)]
    return vectors


def validate(
    validation, model: str, claims: list[vpb.ClaimedArtifact], **extra
) -> list[vpb.ValidatePocArtifactsResponse]:
    request = vpb.ValidatePocArtifactsRequest(
        block_hash="v-block",
        public_key="v-key",
        params=params(model),
        artifacts=claims,
        stat_test=NETWORK_TEST,
        batch_size=16,
        **extra,
    )
    return list(validation.ValidatePocArtifacts(request))


def test_honest_artifacts_validate_and_tampered_ones_are_flagged(client: InferenceClient, stubs) -> None:
    poc, validation = stubs
    model = client.model_info().served_model_name
    nonces = list(range(100, 140))
    honest = computed_artifacts(poc, model, nonces)

    # Half as raw bytes, half in the network's base64: both forms are accepted.
    claims = [
        vpb.ClaimedArtifact(nonce=n, vector_f16=honest[n])
        if n % 2
        else vpb.ClaimedArtifact(nonce=n, vector_b64=base64.b64encode(honest[n]).decode())
        for n in nonces
    ]
    responses = validate(validation, model, claims)
    progress = [r.progress for r in responses if r.HasField("progress")]
    summary = responses[-1].summary
    assert responses[-1].HasField("summary") and len(progress) == 3
    assert [n for p in progress for n in p.nonces] == nonces
    assert max(d for p in progress for d in p.distances) == 0.0
    assert (summary.n_total, summary.n_mismatch, summary.p_value, summary.fraud_detected) == (40, 0, 1.0, False)

    perturbed, undecodable = nonces[:4], nonces[4:6]
    tampered = []
    for n in nonces:
        vector = np.frombuffer(honest[n], dtype="<f2").copy()
        if n in perturbed:
            vector[0] += np.float16(0.5)
        encoded = base64.b64encode(vector.astype("<f2").tobytes()).decode()
        if n == undecodable[0]:
            encoded = "not base64!"
        if n == undecodable[1]:
            encoded = base64.b64encode(honest[n][:-2]).decode()  # k-1 values
        tampered.append(vpb.ClaimedArtifact(nonce=n, vector_b64=encoded))
    summary = validate(validation, model, tampered)[-1].summary
    expected = fraud_test(6, 40, NETWORK_TEST.p_mismatch, NETWORK_TEST.p_value_threshold)
    assert (summary.n_total, summary.n_mismatch) == (40, 6)
    assert sorted(summary.mismatch_nonces) == sorted(perturbed + undecodable)
    assert summary.p_value == pytest.approx(expected.p_value, rel=1e-12)
    assert summary.fraud_detected == expected.fraud_detected


@pytest.mark.parametrize("missing", ["stat_test", "dist_threshold", "p_mismatch", "p_value_threshold"])
def test_every_threshold_is_required(client: InferenceClient, stubs, missing: str) -> None:
    _, validation = stubs
    model = client.model_info().served_model_name
    request = vpb.ValidatePocArtifactsRequest(
        block_hash="b", public_key="k", params=params(model), artifacts=[vpb.ClaimedArtifact(nonce=1, vector_b64="")]
    )
    if missing != "stat_test":
        request.stat_test.CopyFrom(NETWORK_TEST)
        request.stat_test.ClearField(missing)
    with pytest.raises(grpc.RpcError) as caught:
        list(validation.ValidatePocArtifacts(request))
    error = ServerError.from_rpc_error(caught.value)
    assert (error.code, error.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_FIELD")
    assert error.field == ("stat_test" if missing == "stat_test" else f"stat_test.{missing}")


def test_the_summary_goes_to_the_validated_callback(client: InferenceClient, stubs) -> None:
    poc, validation = stubs
    model = client.model_info().served_model_name
    honest = computed_artifacts(poc, model, [7, 8, 9])
    claims = [vpb.ClaimedArtifact(nonce=n, vector_f16=v) for n, v in honest.items()]
    with HttpReceiver(fail_first=1) as receiver:
        validate(validation, model, claims, callback_url=receiver.url, request_id="job-1", block_height=42, node_id=3)
        assert receiver.wait_for(lambda r: r.received("/validated"), timeout=30)
    body = receiver.received("/validated")[0]
    assert body == {
        "request_id": "job-1",
        "block_hash": "v-block",
        "block_height": 42,
        "public_key": "v-key",
        "node_id": 3,
        "n_total": 3,
        "n_mismatch": 0,
        "mismatch_nonces": [],
        "p_value": 1.0,
        "fraud_detected": False,
    }


def test_a_callback_receiver_that_fails_twice_gets_every_artifact(client: InferenceClient, stubs) -> None:
    poc, _ = stubs
    model = client.model_info().served_model_name
    with HttpReceiver(fail_first=2) as receiver:
        request = poc_pb2.StartRoundRequest(
            block_hash="cb-block",
            block_height=9,
            public_key="cb-key",
            node_id=1,
            node_count=2,
            params=params(model),
            batch_size=8,
            callback_url=receiver.url,
        )
        round_id = poc.StartRound(request).status.round_id
        try:
            subscription = poc.SubscribeArtifacts(poc_pb2.SubscribeArtifactsRequest(round_id=round_id))
            produced: dict[int, str] = {}
            for message in subscription:
                if message.HasField("batch"):
                    for index, nonce in enumerate(message.batch.nonces):
                        produced[nonce] = base64.b64encode(
                            message.batch.vectors[2 * K * index : 2 * K * (index + 1)]
                        ).decode()
                    if len(produced) >= 200:
                        poc.StopRound(poc_pb2.StopRoundRequest(round_id=round_id))
                elif message.HasField("end"):
                    break
        finally:
            poc.StopRound(poc_pb2.StopRoundRequest(round_id=round_id))

        def delivered(r: HttpReceiver) -> dict[int, str]:
            return {a["nonce"]: a["vector_b64"] for body in r.received("/generated") for a in body["artifacts"]}

        assert receiver.wait_for(lambda r: len(delivered(r)) >= len(produced), timeout=60)
        assert receiver.attempts > 2
        bodies = receiver.received("/generated")
        keys = receiver.keys("/generated")
    # Every body names itself, so a receiver can tell a repeat (a body it took whose answer was lost) from news.
    assert all(keys) and len(set(keys)) == len(keys), keys
    assert delivered(receiver) == produced
    assert all(n % 2 == 1 for n in produced)  # node 1 of 2: odd nonces only
    for body in bodies:
        assert {k: body[k] for k in ("public_key", "block_hash", "block_height", "node_id")} == {
            "public_key": "cb-key",
            "block_hash": "cb-block",
            "block_height": 9,
            "node_id": 1,
        }
        assert body["encoding"] == {"dtype": "f16", "k_dim": K, "endian": "le"}
    # The receiver keeps a body before it answers 200; the server counts the delivery when it reads that answer.
    deadline = time.monotonic() + 30
    while (
        status := poc.GetRoundStatus(poc_pb2.GetRoundStatusRequest(round_id=round_id)).status
    ).callback.delivered < len(produced):
        assert time.monotonic() < deadline, status.callback
        time.sleep(0.05)
    assert status.callback.delivered == len(produced) and status.callback.given_up == 0
