"""`pow/generate` and `GET pow/generate/{id}` against the server's own round control, admission and validation code
(validate_poc_artifacts, compute_artifacts), with a stand-in for the engine alone (a nonce's vector is its value in
the first coordinate): a job is answered `queued` at once and run by the queue; a validation job's verdict goes to
`{url}/validated` in the deployed body, decided at the fleet's p < 0.01 or the caller's threshold as
--fraud-threshold says; a job without validation posts its artifacts to `{url}/generated` with its request_id;
refusals are JSON errors and queue nothing; pow/stop and /api/v1/stop cancel the queued jobs."""

from __future__ import annotations

import asyncio
import base64
import re
import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest

from engine_ext.poc.batch import PocBatch, PocBatchResult
from server.http.options import FraudThreshold
from server.poc.delivery.validated import VALIDATED_FIELDS
from tests.unit.test_http_management import HTTP_PORT, SERVED, Node, error_of, node_of
from tests.unit.test_mining_round import PARAMS, K, StandInEngine

GENERATE_PATH = "/api/v1/inference/pow/generate"
URL = "http://api-node:9100/v2/poc-batches/Qwen%252FQwen3-0.6B"
HEADER: dict[str, Any] = {
    "block_hash": "0xabc",
    "block_height": 1234,
    "public_key": "pk-validated",
    "node_id": 2,
    "node_count": 5,
    "params": {"model": SERVED.path, "seq_len": 16, "k_dim": K},
    "url": URL,
}
NONCES = list(range(100, 120))
# 5 of 20 mismatched at p_mismatch 0.1: P[X >= 5] = 0.043, between the fleet's 0.01 and the caller's 0.5.
TAMPERED = NONCES[:5]
STAT_TEST = {"dist_threshold": 0.5, "p_mismatch": 0.1, "p_value_threshold": 0.5}
JOB_ID = re.compile(rf"^{HTTP_PORT}:[0-9a-f]{{8}}-[0-9a-f]{{4}}-[0-9a-f]{{4}}-[0-9a-f]{{4}}-[0-9a-f]{{12}}$")


def claimed(nonce: int, tampered: bool = False) -> str:
    """The stand-in engine's vector for the nonce, or one far from it."""
    vector = np.zeros(K, dtype="<f2")
    vector[0] = nonce + (50 if tampered else 0)
    return base64.b64encode(vector.tobytes()).decode()


def validation_body(tampered: list[int], nonces: list[int] = NONCES) -> dict:
    artifacts = [{"nonce": n, "vector_b64": claimed(n, n in tampered)} for n in nonces]
    return {**HEADER, "nonces": nonces, "validation": {"artifacts": artifacts}, "stat_test": STAT_TEST}


def finished(node: Node, request_id: str) -> dict:
    for _ in range(500):
        job = node.client.get(f"{GENERATE_PATH}/{request_id}")
        assert job.status_code == 200, job.text
        if job.json()["status"] not in ("queued", "running"):
            return job.json()
        time.sleep(0.01)
    raise AssertionError(f"job {request_id} did not finish")


def queued(node: Node, body: dict) -> str:
    response = node.client.post(GENERATE_PATH, json=body)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert set(answer) == {"status", "request_id", "queued_count"} and answer["status"] == "queued"
    assert JOB_ID.match(answer["request_id"]) and answer["queued_count"] >= len(body["nonces"])
    return answer["request_id"]


@pytest.mark.parametrize(("tampered", "fraud"), [([], False), (NONCES[:12], True)], ids=["honest", "tampered"])
def test_a_validation_job_posts_its_verdict_to_validated_in_the_deployed_body(tampered: list[int], fraud: bool) -> None:
    with node_of() as node:
        request_id = queued(node, validation_body(tampered))
        job = finished(node, request_id)
    assert (job["request_id"], job["status"], job["error"]) == (request_id, "completed", None)
    ((url, body),) = node.validated
    assert url == URL
    assert tuple(body) == VALIDATED_FIELDS
    assert body == job["result"]
    assert (body["request_id"], body["public_key"], body["block_hash"]) == (request_id, "pk-validated", "0xabc")
    assert (body["block_height"], body["node_id"], body["n_total"]) == (1234, 2, len(NONCES))
    assert (body["n_mismatch"], body["mismatch_nonces"]) == (len(tampered), tampered)
    assert body["fraud_detected"] is fraud
    # The stand-in engine computed every claimed nonce.
    assert sorted(n for batch in node.engines[0].batches for n in batch.nonces) == NONCES


@pytest.mark.parametrize(
    ("threshold", "fraud"), [(FraudThreshold.FLEET, False), (FraudThreshold.CALLER, True)], ids=["fleet", "caller"]
)
def test_the_fraud_threshold_flag_decides_a_p_value_between_the_fleets_and_the_callers(
    threshold: FraudThreshold, fraud: bool
) -> None:
    with node_of(fraud_threshold=threshold) as node:
        finished(node, queued(node, validation_body(TAMPERED)))
    ((_, body),) = node.validated
    assert 0.01 < body["p_value"] < STAT_TEST["p_value_threshold"]
    assert body["fraud_detected"] is fraud


def test_a_generate_without_validation_posts_its_artifacts_to_generated_with_its_request_id() -> None:
    nonces = [5, 9, 13]
    with node_of() as node:
        request_id = queued(node, {**HEADER, "nonces": nonces})
        job = finished(node, request_id)
    assert job["status"] == "completed"
    assert job["result"] == {
        "artifacts": [{"nonce": n, "vector_b64": claimed(n)} for n in nonces],
        "not_computable": [],
    }
    assert node.validated == []
    assert {(url, request_id_of) for url, _, request_id_of, _ in node.generated} == {(URL, request_id)}
    assert [n for *_, batch in node.generated for n in batch] == nonces
    identity = node.generated[0][1]
    assert (identity.public_key, identity.block_hash, identity.block_height, identity.node_id) == (
        "pk-validated",
        "0xabc",
        1234,
        2,
    )


class RecordingSink:
    """The pull stream's sink as the routes see it (CallbackSink): what was posted, in order."""

    def __init__(self) -> None:
        self.posted: list[tuple[str, dict]] = []

    def post(self, path: str, body: Mapping[str, Any]) -> str:
        self.posted.append((path, dict(body)))
        return f"boot-{len(self.posted)}"


def test_jobs_without_url_go_to_the_pull_stream_where_it_is_served() -> None:
    sink = RecordingSink()
    unaddressed = {key: value for key, value in HEADER.items() if key != "url"}
    model_path = "/v2/poc-batches/" + SERVED.path.replace("/", "%252F")
    with node_of(stream=sink) as node:
        verdict = finished(node, queued(node, {**validation_body([]), "url": ""}))
        artifacts_id = queued(node, {**unaddressed, "nonces": [5, 9]})
        finished(node, artifacts_id)
    assert node.validated == [] and node.generated == []
    (validated_path, validated), *generated = sink.posted
    assert (validated_path, validated) == (f"{model_path}/validated", verdict["result"])
    assert tuple(validated) == VALIDATED_FIELDS and validated["fraud_detected"] is False
    assert {path for path, _ in generated} == {f"{model_path}/generated"}
    assert {body["request_id"] for _, body in generated} == {artifacts_id}
    assert [a["nonce"] for _, body in generated for a in body["artifacts"]] == [5, 9]


def test_malformed_and_unknown_job_ids_are_400_and_404() -> None:
    with node_of() as node:
        for malformed in ("nope", "8080:not-a-uuid", "port:1b4e28ba-2fa1-11d2-883f-0016d3cca427", ":"):
            error = error_of(node.client.get(f"{GENERATE_PATH}/{malformed}"))
            assert (error["code"], error["type"], error["param"]) == (400, "MALFORMED_REQUEST_ID", "request_id")
        unknown = error_of(node.client.get(f"{GENERATE_PATH}/{HTTP_PORT}:1b4e28ba-2fa1-11d2-883f-0016d3cca427"))
        assert (unknown["code"], unknown["type"]) == (404, "JOB_NOT_FOUND")


def test_bad_generate_bodies_are_refused_before_anything_is_queued() -> None:
    with node_of() as node:
        no_nonces = {key: value for key, value in validation_body([]).items() if key != "nonces"}
        assert (error_of(node.client.post(GENERATE_PATH, json=no_nonces))["code"]) == 422
        assert error_of(node.client.post(GENERATE_PATH, content=b"{"))["type"] == "INVALID_JSON"
        mismatch = validation_body([], NONCES)
        mismatch["nonces"] = NONCES[:-1]
        assert error_of(node.client.post(GENERATE_PATH, json=mismatch))["type"] == "NONCE_SET_MISMATCH"
        # A stat-test field the API node left out: the shared check names it (400), before the job is queued.
        partial = {**validation_body([]), "stat_test": {"dist_threshold": 0.5, "p_value_threshold": 0.5}}
        error = error_of(node.client.post(GENERATE_PATH, json=partial))
        assert (error["code"], error["param"]) == (400, "stat_test.p_mismatch")
        other_model = {**validation_body([]), "params": {**HEADER["params"], "model": "other/model"}}
        assert error_of(node.client.post(GENERATE_PATH, json=other_model))["code"] == 409
        assert node.jobs.nonces_queued == 0 and node.engines[0].batches == [] and node.validated == []


class SlowEngine(StandInEngine):
    """Each batch takes a while: a job is seen running."""

    async def poc_forward(self, batch: PocBatch) -> PocBatchResult:
        await asyncio.sleep(0.3)
        return await super().poc_forward(batch)


@pytest.mark.parametrize("stop_path", ["/api/v1/inference/pow/stop", "/api/v1/stop"])
def test_a_job_is_pow_validating_while_it_runs_and_stop_cancels_it_and_the_queued_ones(stop_path: str) -> None:
    with node_of(SlowEngine()) as node:
        body = {**validation_body([]), "batch_size": 1}
        first, second = queued(node, body), queued(node, body)
        while node.client.get(f"{GENERATE_PATH}/{first}").json()["status"] == "queued":
            time.sleep(0.01)
        state = node.client.get("/api/v1/state").json()
        assert (state["state"], state["poc_status"]) == ("POW", "VALIDATING")
        status = node.client.get("/api/v1/inference/pow/status").json()
        assert status["status"] == "VALIDATING" and status["backends"][0]["status"] == "VALIDATING"
        assert node.client.get(f"{GENERATE_PATH}/{second}").json()["status"] == "queued"
        assert node.client.post(stop_path, json={}).status_code == 200
        # Answered once the running job has ended.
        for request_id in (first, second):
            assert node.client.get(f"{GENERATE_PATH}/{request_id}").json()["status"] == "cancelled"
        assert node.client.get("/api/v1/state").json()["poc_status"] == "IDLE"
        assert node.validated == [] and len(node.engines[0].batches) < len(NONCES)


def test_a_job_waits_for_the_mining_round_and_runs_once_it_has_ended() -> None:
    with node_of() as node:
        node.client.portal.call(node.control.start, PARAMS)
        request_id = queued(node, validation_body([]))
        time.sleep(0.2)
        assert node.client.get(f"{GENERATE_PATH}/{request_id}").json()["status"] == "queued"
        assert node.validated == []
        running = node.control.running
        assert running is not None
        node.client.portal.call(node.control.stop, running.round_id)
        assert finished(node, request_id)["status"] == "completed"
    assert len(node.validated) == 1
