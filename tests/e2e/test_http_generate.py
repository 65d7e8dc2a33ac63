"""`pow/generate` and `GET pow/generate/{id}` of a real server (--http-port), spoken to as the network's API node
speaks to an ML node (../shared/spec/mlnode-http-api.md section 1.2): a generate without validation computes the
nonces' artifacts and posts them to `{url}/generated` with its request_id; a validation job over those artifacts
recomputes them on the engine and posts its verdict to `{url}/validated` in the deployed body (honest: no fraud;
tampered: fraud), at the fleet's p < 0.01 whatever the API node's threshold; a verdict for a receiver that is down
arrives once it is up (the durable callback store); pow/stop cancels the queued and the running jobs; bad ids and
bodies are JSON errors while the server serves on."""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from gonka.mlnode.client import InferenceClient
from tests.support.http_receiver import HttpReceiver
from tests.support.server_process import SERVER_LAYER_FLAGS, ServerProcess, free_port, start_server

HTTP_TIMEOUT_SECONDS = 60.0
JOB_TIMEOUT_SECONDS = 240.0
GENERATE = "/api/v1/inference/pow/generate"
BASE = "/v2/poc-batches/qwen3-tiny"
NONCES = list(range(200, 220))
# The network's stat test; the API node's p_value_threshold (0.5 here) is dropped for the fleet's 0.01.
STAT_TEST = {"dist_threshold": 0.2, "p_mismatch": 0.1, "p_value_threshold": 0.5}
VALIDATED_FIELDS = {
    "request_id",
    "block_hash",
    "block_height",
    "public_key",
    "node_id",
    "n_total",
    "n_mismatch",
    "mismatch_nonces",
    "p_value",
    "fraud_detected",
}


@dataclass
class HttpNode:
    server: ServerProcess
    http_port: int
    api: httpx.Client
    model_path: str


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory, model_dir: Path) -> Iterator[HttpNode]:
    http_port = free_port()
    flags = ["--http-port", str(http_port), "--poc-callback-interval-s", "0.5", *SERVER_LAYER_FLAGS]
    server = start_server(tmp_path_factory.mktemp("http-generate") / "server.log", flags)
    try:
        with (
            httpx.Client(base_url=f"http://127.0.0.1:{http_port}", timeout=HTTP_TIMEOUT_SECONDS) as api,
            InferenceClient(server.target) as client,
        ):
            yield HttpNode(server, http_port, api, client.model_info().model_path)
    finally:
        exit_code = server.stop()
    assert exit_code == 0, f"server exited with {exit_code} on SIGTERM:\n{server.log_tail()}"


def header(node: HttpNode, url: str) -> dict[str, Any]:
    """PoCGenerateRequestV2's header as the Go client sends it: the model by the path the engine loaded, no k_dim,
    no batch_size, no wait."""
    return {
        "block_hash": "0x" + "ab" * 32,
        "block_height": 91,
        "public_key": "validated-participant",
        "node_id": 4,
        "node_count": 7,
        "params": {"model": node.model_path, "seq_len": 64},
        "url": url,
    }


def queue(node: HttpNode, body: dict[str, Any]) -> str:
    response = node.api.post(GENERATE, json=body)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["status"] == "queued" and answer["queued_count"] >= len(body["nonces"])
    port, _, _ = answer["request_id"].partition(":")
    assert port == str(node.http_port)
    return answer["request_id"]


def job_of(node: HttpNode, request_id: str) -> dict[str, Any]:
    response = node.api.get(f"{GENERATE}/{request_id}")
    assert response.status_code == 200, response.text
    return response.json()


def finished(node: HttpNode, request_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + JOB_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        job = job_of(node, request_id)
        if job["status"] not in ("queued", "running"):
            return job
        time.sleep(0.2)
    raise AssertionError(f"job {request_id} did not finish in {JOB_TIMEOUT_SECONDS} s")


def error_of(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == status and error["message"]
    return error


def tampered(vector_b64: str) -> str:
    vector = np.frombuffer(base64.b64decode(vector_b64), dtype="<f2").astype(np.float32)
    vector[0] += 1.0
    return base64.b64encode(vector.astype("<f2").tobytes()).decode()


def test_computed_artifacts_then_honest_and_tampered_validation_verdicts_reach_the_receiver(node: HttpNode) -> None:
    with HttpReceiver() as receiver:
        base = header(node, receiver.url + BASE)
        computing = queue(node, {**base, "nonces": NONCES})
        computed = finished(node, computing)
        assert computed["status"] == "completed", computed
        artifacts = {a["nonce"]: a["vector_b64"] for a in computed["result"]["artifacts"]}
        assert sorted(artifacts) == NONCES and computed["result"]["not_computable"] == []
        # The same artifacts reach {url}/generated with the job's request_id, in the deployed body.
        assert receiver.wait_for(lambda r: len(r.received(BASE + "/generated")) >= 1, JOB_TIMEOUT_SECONDS)
        posted = receiver.received(BASE + "/generated")
        for body in posted:
            assert set(body) == {
                "request_id",
                "public_key",
                "block_hash",
                "block_height",
                "node_id",
                "artifacts",
                "encoding",
            }
            assert (body["request_id"], body["public_key"], body["node_id"]) == (computing, base["public_key"], 4)
        assert {a["nonce"]: a["vector_b64"] for b in posted for a in b["artifacts"]} == artifacts

        verdicts = {}
        for name, changed in (("honest", []), ("tampered", NONCES[::2])):
            claims = [
                {"nonce": n, "vector_b64": tampered(artifacts[n]) if n in changed else artifacts[n]} for n in NONCES
            ]
            body = {**base, "nonces": NONCES, "validation": {"artifacts": claims}, "stat_test": STAT_TEST}
            request_id = queue(node, body)
            job = finished(node, request_id)
            assert job["status"] == "completed", job
            verdicts[name] = (request_id, changed, job["result"])
        assert receiver.wait_for(lambda r: len(r.received(BASE + "/validated")) == 2, JOB_TIMEOUT_SECONDS)
        delivered = {body["request_id"]: body for body in receiver.received(BASE + "/validated")}
    for name, (request_id, changed, result) in verdicts.items():
        body = delivered[request_id]
        assert set(body) == VALIDATED_FIELDS and body == result
        assert (body["public_key"], body["block_hash"], body["block_height"], body["node_id"]) == (
            base["public_key"],
            base["block_hash"],
            91,
            4,
        )
        assert (body["n_total"], body["mismatch_nonces"]) == (len(NONCES), changed)
        assert body["fraud_detected"] is (name == "tampered")


def test_a_p_value_between_the_fleets_and_the_callers_threshold_is_no_fraud_at_the_fleet_default(
    node: HttpNode,
) -> None:
    base = header(node, "")
    computed = finished(node, queue(node, {**base, "nonces": NONCES}))
    artifacts = {a["nonce"]: a["vector_b64"] for a in computed["result"]["artifacts"]}
    # 5 of 20 mismatched at p_mismatch 0.1: p = 0.043, above the fleet's 0.01, below the caller's 0.5.
    changed = NONCES[:5]
    claims = [{"nonce": n, "vector_b64": tampered(artifacts[n]) if n in changed else artifacts[n]} for n in NONCES]
    body = {**base, "nonces": NONCES, "validation": {"artifacts": claims}, "stat_test": STAT_TEST}
    verdict = finished(node, queue(node, body))["result"]
    assert verdict["n_mismatch"] == 5 and 0.01 < verdict["p_value"] < STAT_TEST["p_value_threshold"]
    assert verdict["fraud_detected"] is False


def test_a_verdict_for_a_receiver_that_is_down_arrives_once_it_is_up(node: HttpNode) -> None:
    receiver_port = free_port()
    base = header(node, f"http://127.0.0.1:{receiver_port}{BASE}")
    computed = finished(node, queue(node, {**header(node, ""), "nonces": NONCES[:4]}))
    claims = computed["result"]["artifacts"]
    body = {**base, "nonces": NONCES[:4], "validation": {"artifacts": claims}, "stat_test": STAT_TEST}
    request_id = queue(node, body)
    assert finished(node, request_id)["status"] == "completed"
    # The first POSTs found nobody listening; the store keeps the verdict and the sender retries it.
    time.sleep(2)
    with HttpReceiver(port=receiver_port) as receiver:
        assert receiver.wait_for(lambda r: len(r.received(BASE + "/validated")) >= 1, JOB_TIMEOUT_SECONDS)
        (verdict,) = {b["request_id"]: b for b in receiver.received(BASE + "/validated")}.values()
    assert verdict["request_id"] == request_id and verdict["fraud_detected"] is False
    assert "callback POST" in node.server.log_path.read_text(errors="replace")


def test_pow_stop_cancels_the_running_and_the_queued_jobs(node: HttpNode) -> None:
    base = header(node, "")
    many = list(range(10_000, 13_000))
    running, waiting = queue(node, {**base, "nonces": many}), queue(node, {**base, "nonces": NONCES})
    assert job_of(node, waiting)["status"] == "queued"
    deadline = time.monotonic() + JOB_TIMEOUT_SECONDS
    while job_of(node, running)["status"] == "queued" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert job_of(node, running)["status"] == "running"
    state = node.api.get("/api/v1/state").json()
    assert (state["state"], state["poc_status"]) == ("POW", "VALIDATING")
    stopped = node.api.post("/api/v1/inference/pow/stop", json={})
    assert stopped.json() == {"status": "OK", "results": [{"port": node.http_port, "status": "stopped"}]}
    # Answered once the running job has ended.
    assert [job_of(node, request_id)["status"] for request_id in (running, waiting)] == ["cancelled", "cancelled"]
    state = node.api.get("/api/v1/state").json()
    assert (state["state"], state["poc_status"]) == ("INFERENCE", "IDLE")


def test_bad_ids_and_bodies_are_json_errors_and_the_server_serves_on(node: HttpNode) -> None:
    assert error_of(node.api.get(f"{GENERATE}/not-an-id"), 400)["type"] == "MALFORMED_REQUEST_ID"
    unknown = f"{node.http_port}:1b4e28ba-2fa1-11d2-883f-0016d3cca427"
    assert error_of(node.api.get(f"{GENERATE}/{unknown}"), 404)["type"] == "JOB_NOT_FOUND"
    base = header(node, "")
    assert error_of(node.api.post(GENERATE, content=b"{nope"), 400)["type"] == "INVALID_JSON"
    assert error_of(node.api.post(GENERATE, json={**base, "nonces": "1,2"}), 422)["param"] == "nonces"
    mismatch = {
        **base,
        "nonces": [1, 2],
        "validation": {"artifacts": [{"nonce": 1, "vector_b64": "AAAA"}]},
        "stat_test": STAT_TEST,
    }
    assert error_of(node.api.post(GENERATE, json=mismatch), 400)["type"] == "NONCE_SET_MISMATCH"
    no_p_mismatch = {**mismatch, "nonces": [1], "stat_test": {"dist_threshold": 0.2, "p_value_threshold": 0.5}}
    assert error_of(node.api.post(GENERATE, json=no_p_mismatch), 400)["param"] == "stat_test.p_mismatch"
    assert error_of(node.api.post(GENERATE, json={**base, "nonces": []}), 400)["param"] == "nonces"
    assert node.api.get("/health").status_code == 200
    assert node.api.get("/api/v1/state").json()["state"] == "INFERENCE"
