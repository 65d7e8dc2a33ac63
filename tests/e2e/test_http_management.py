"""The HTTP management API (--http-port) of a real server, spoken to as the network's API node speaks to an ML node
(../shared/spec/mlnode-http-api.md): state from start to stop to inference/up, versions, the probes, the clock, the
`/{version}` prefix, bad bodies refused with a JSON error while the server serves on; and a round started over gRPC is
POW on the HTTP API, as the one engine and round control behind both make it. The module's server is stopped with
SIGTERM at the end: it exits 0 and its HTTP port closes with it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import pytest

from gonka.mlnode.client import InferenceClient, decode_batch
from gonka.mlnode.client.artifacts import vector_from_b64
from gonka.mlnode.v1 import inference_pb2, poc_pb2
from tests.support.http_receiver import HttpReceiver
from tests.support.server_process import SERVER_LAYER_FLAGS, ServerProcess, free_port, start_server

HTTP_TIMEOUT_SECONDS = 60.0
CALL_TIMEOUT_SECONDS = 120.0
MAX_REQUEST_MIB = 1
PROMPT_IDS = [9707, 1879, 11, 419]
NODE_ID, NODE_COUNT = 1, 3
BLOCK_HASH, BLOCK_HEIGHT, PUBLIC_KEY, SEQ_LEN = "0x" + "cd" * 32, 77, "http-state-key", 64
ROUND = {"block_hash": BLOCK_HASH, "block_height": BLOCK_HEIGHT, "public_key": PUBLIC_KEY, "seq_len": SEQ_LEN}


@dataclass
class HttpNode:
    server: ServerProcess
    http_port: int
    api: httpx.Client
    client: InferenceClient


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory, model_dir: Path) -> Iterator[HttpNode]:
    http_port = free_port()
    flags = [
        "--http-port",
        str(http_port),
        "--max-request-mb",
        str(MAX_REQUEST_MIB),
        "--poc-callback-interval-s",
        "0.5",
        *SERVER_LAYER_FLAGS,
    ]
    server = start_server(tmp_path_factory.mktemp("http") / "server.log", flags)
    try:
        with (
            httpx.Client(base_url=f"http://127.0.0.1:{http_port}", timeout=HTTP_TIMEOUT_SECONDS) as api,
            InferenceClient(server.target) as client,
        ):
            yield HttpNode(server, http_port, api, client)
    finally:
        exit_code = server.stop()
    assert exit_code == 0, f"server exited with {exit_code} on SIGTERM:\n{server.log_tail()}"
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{http_port}/health", timeout=5)


@pytest.fixture(scope="module")
def model(node: HttpNode) -> inference_pb2.GetModelInfoResponse:
    return node.client.model_info()


def state_of(node: HttpNode, prefix: str = "") -> dict:
    response = node.api.get(f"{prefix}/api/v1/state")
    assert response.status_code == 200, response.text
    return response.json()


def error_of(response: httpx.Response, status: int) -> dict:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    error = response.json()["error"]
    assert error["code"] == status and error["message"]
    return error


def test_a_started_node_is_in_inference_with_the_deployed_fields(
    node: HttpNode, model: inference_pb2.GetModelInfoResponse
) -> None:
    assert state_of(node) == {
        "state": "INFERENCE",
        "version": "3.1.0",
        "poc_validation_inference": True,
        "poc_status": "IDLE",
        "inference_healthy": True,
        "loaded_model": model.model_path,
    }


def test_versions_report_the_engines_vllm_on_both_paths(node: HttpNode) -> None:
    vllm = node.client.server_status().versions.vllm
    for path in ("/api/v1/versions", "/api/v1/inference/pow/versions"):
        response = node.api.get(path)
        assert response.status_code == 200
        assert response.json() == {"vllm_version": vllm, "poc_validation_inference": True}


def test_the_probes_answer_200_while_the_engine_serves(node: HttpNode) -> None:
    for path in ("/health", "/livez"):
        response = node.api.get(path)
        assert response.status_code == 200
        assert response.json() == {
            "status": "healthy",
            "state": "INFERENCE",
            "instances": [{"index": 0, "state": "serving"}],
        }
    readiness = node.api.get("/readyz")
    assert (readiness.status_code, readiness.json()) == (200, {"ready": True})


def test_the_clock_probe_stamps_the_servers_unix_nanoseconds(node: HttpNode) -> None:
    before = time.time_ns()
    response = node.api.get("/api/v1/clock")
    after = time.time_ns()
    assert response.status_code == 204
    received, sent = int(response.headers["X-Server-Recv-Ns"]), int(response.headers["X-Server-Send-Ns"])
    # One host: the server's clock is this one's.
    assert before <= received <= sent <= after


def test_every_path_answers_under_the_version_prefix(node: HttpNode, model: inference_pb2.GetModelInfoResponse) -> None:
    assert state_of(node, "/v3.0.8")["state"] == "INFERENCE"
    assert node.api.get("/v3.1.0/health").status_code == 200
    assert node.api.get("/3.1.0/api/v1/versions").status_code == 200
    assert error_of(node.api.get("/latest/api/v1/state"), 404)["type"] == "NOT_FOUND"


def test_stop_then_inference_up_with_the_served_model_by_either_name(
    node: HttpNode, model: inference_pb2.GetModelInfoResponse
) -> None:
    try:
        # The API node sends this POST without a body or Content-Type.
        assert node.api.post("/api/v1/stop").json() == {"status": "OK"}
        assert state_of(node)["state"] == "STOPPED"
        # The engine stays loaded: live and ready, and gRPC inference unaffected.
        assert node.api.get("/health").json()["state"] == "STOPPED"
        assert node.api.get("/readyz").status_code == 200
        assert len(node.client.generate(token_ids=PROMPT_IDS, max_tokens=2, ignore_eos=True).first.token_ids) == 2
        for name in (model.model_path, model.served_model_name):
            response = node.api.post("/v3.1.0/api/v1/inference/up", json={"model": name, "dtype": "bfloat16"})
            assert (response.status_code, response.json()) == (200, {"status": "OK"})
            assert state_of(node)["state"] == "INFERENCE"
            node.api.post("/api/v1/stop")
    finally:
        node.api.post("/api/v1/inference/up", json={"model": model.served_model_name})
    assert state_of(node)["state"] == "INFERENCE"


def test_inference_up_with_another_model_is_409_and_changes_nothing(
    node: HttpNode, model: inference_pb2.GetModelInfoResponse
) -> None:
    assert node.api.post("/api/v1/stop").status_code == 200
    try:
        error = error_of(node.api.post("/api/v1/inference/up", json={"model": "Qwen/Qwen3-235B-A22B"}), 409)
        assert (error["type"], error["param"]) == ("MODEL_MISMATCH", "model")
        assert state_of(node)["state"] == "STOPPED"
        assert "inference/up refused" in node.server.log_path.read_text(errors="replace")
    finally:
        node.api.post("/api/v1/inference/up", json={"model": model.served_model_name})
    assert state_of(node)["state"] == "INFERENCE"


def test_bad_bodies_are_json_errors_and_the_server_serves_on(
    node: HttpNode, model: inference_pb2.GetModelInfoResponse
) -> None:
    up = "/api/v1/inference/up"
    assert error_of(node.api.post(up, content=b"{not json"), 400)["type"] == "INVALID_JSON"
    assert error_of(node.api.post(up, content=b""), 400)["type"] == "INVALID_JSON"
    assert error_of(node.api.post(up, json={"model": 7}), 422)["param"] == "model"
    assert error_of(node.api.post(up, json={}), 422)["param"] == "model"
    assert error_of(node.api.post(up, json=["model"]), 422)["code"] == 422
    oversized = b'{"model": "' + b"x" * (MAX_REQUEST_MIB * 1024 * 1024) + b'"}'
    assert error_of(node.api.post(up, content=oversized), 413)["type"] == "REQUEST_TOO_LARGE"
    assert error_of(node.api.get("/api/v1/nowhere"), 404)["type"] == "NOT_FOUND"
    assert error_of(node.api.get("/api/v1/stop"), 405)["type"] == "METHOD_NOT_ALLOWED"
    # A body without a Content-Type is JSON all the same (the API node sends some so).
    bare = node.api.post(up, content=f'{{"model": "{model.served_model_name}"}}'.encode())
    assert "content-type" not in bare.request.headers
    assert (bare.status_code, bare.json()) == (200, {"status": "OK"})
    assert state_of(node)["state"] == "INFERENCE"
    assert node.api.get("/health").status_code == 200


def test_a_round_started_over_grpc_is_pow_until_stop_round(
    node: HttpNode, model: inference_pb2.GetModelInfoResponse
) -> None:
    started = node.client.poc.start_round(model=model.served_model_name, **ROUND, timeout=CALL_TIMEOUT_SECONDS)
    try:
        # Registered before StartRound answers: POW at once.
        seen = state_of(node)
        assert (seen["state"], seen["poc_status"]) == ("POW", "GENERATING")
        assert node.api.get("/health").json()["state"] == "POW"
    finally:
        stopped = node.client.poc.stop_round(started.round_id, timeout=CALL_TIMEOUT_SECONDS)
    assert stopped.state == poc_pb2.ROUND_STATE_STOPPED
    seen = state_of(node)
    assert (seen["state"], seen["poc_status"]) == ("INFERENCE", "IDLE")


def test_http_stop_ends_a_round_started_over_grpc(node: HttpNode, model: inference_pb2.GetModelInfoResponse) -> None:
    started = node.client.poc.start_round(model=model.served_model_name, **ROUND, timeout=CALL_TIMEOUT_SECONDS)
    try:
        assert state_of(node)["state"] == "POW"
        # Answered once the round has ended (its forwards in flight returned).
        assert node.api.post("/api/v1/stop").json() == {"status": "OK"}
        status = node.client.poc.round_status(started.round_id, timeout=CALL_TIMEOUT_SECONDS)
        assert status.state == poc_pb2.ROUND_STATE_STOPPED
        assert (state_of(node)["state"], state_of(node)["poc_status"]) == ("STOPPED", "IDLE")
        # Inference is admitted again on gRPC (the gate reopened with the round's end).
        assert len(node.client.generate(token_ids=PROMPT_IDS, max_tokens=2, ignore_eos=True).first.token_ids) == 2
    finally:
        if node.client.poc.round_status(started.round_id).state == poc_pb2.ROUND_STATE_GENERATING:
            node.client.poc.stop_round(started.round_id, timeout=CALL_TIMEOUT_SECONDS)
        node.api.post("/api/v1/inference/up", json={"model": model.served_model_name})
    assert state_of(node)["state"] == "INFERENCE"


def test_a_round_started_by_init_generate_posts_its_artifacts_to_the_url_and_pow_stop_ends_it(
    node: HttpNode, model: inference_pb2.GetModelInfoResponse
) -> None:
    # The API node's callback base, as it builds it: {poc_callback_url}/v2/poc-batches/{escaped model}.
    base = "/v2/poc-batches/qwen3-tiny"
    with HttpReceiver() as receiver:
        # PoCInitGenerateRequestV2 as the Go client sends it: no k_dim, no batch_size.
        body = {
            "block_hash": BLOCK_HASH,
            "block_height": BLOCK_HEIGHT,
            "public_key": PUBLIC_KEY,
            "node_id": NODE_ID,
            "node_count": NODE_COUNT,
            "params": {"model": model.model_path, "seq_len": SEQ_LEN},
            "url": receiver.url + base,
        }
        started = node.api.post("/v3.1.0/api/v1/inference/pow/init/generate", json=body)
        try:
            assert started.status_code == 200, started.text
            assert started.json() == {
                "status": "OK",
                "backends": 1,
                "n_groups": 1,
                "results": [{"port": node.http_port, "status": "OK"}],
                "errors": None,
            }
            assert (state_of(node)["state"], state_of(node)["poc_status"]) == ("POW", "GENERATING")
            status = node.api.get("/api/v1/inference/pow/status").json()
            assert status == {
                "status": "GENERATING",
                "backends": [{"port": node.http_port, "instance": 0, "status": "GENERATING"}],
            }
            # The round PocService reports, with the body's parameters.
            grpc_status = node.client.poc.round_status(timeout=CALL_TIMEOUT_SECONDS)
            assert grpc_status.state == poc_pb2.ROUND_STATE_GENERATING
            assert grpc_status.parameters.callback_url == receiver.url + base
            assert receiver.wait_for(lambda r: len(r.received(base + "/generated")) >= 2, CALL_TIMEOUT_SECONDS)
            resent = node.api.post("/api/v1/inference/pow/init/generate", json=body).json()
            assert resent["errors"] == [{"port": node.http_port, "error": "Already generating"}]
        finally:
            stopped = node.api.post("/api/v1/inference/pow/stop", json={})
        assert stopped.json() == {"status": "OK", "results": [{"port": node.http_port, "status": "stopped"}]}
        assert node.client.poc.round_status(grpc_status.round_id).state == poc_pb2.ROUND_STATE_STOPPED
        assert (state_of(node)["state"], state_of(node)["poc_status"]) == ("INFERENCE", "IDLE")
        produced = node.client.poc.round_status(grpc_status.round_id).nonces_produced
        # What the round produced reaches the receiver after the stop (the store's sender flushes it).
        assert receiver.wait_for(
            lambda r: sum(len(b["artifacts"]) for b in r.received(base + "/generated")) == produced,
            CALL_TIMEOUT_SECONDS,
        )
        batches = receiver.received(base + "/generated")
    for batch in batches:
        # The deployed /generated body (spec section 5).
        assert set(batch) == {"public_key", "block_hash", "block_height", "node_id", "artifacts", "encoding"}
        assert (batch["public_key"], batch["block_hash"]) == (PUBLIC_KEY, BLOCK_HASH)
        assert (batch["block_height"], batch["node_id"]) == (BLOCK_HEIGHT, NODE_ID)
        for artifact in batch["artifacts"]:
            assert set(artifact) == {"nonce", "vector_b64"}
            # This node's nonces: node_id + x * node_count (one group).
            assert artifact["nonce"] % NODE_COUNT == NODE_ID
    posted = {artifact["nonce"]: artifact["vector_b64"] for batch in batches for artifact in batch["artifacts"]}
    assert len(posted) == produced
    # The artifacts are the ones ComputeArtifacts recomputes for the same block, key and model (within the deployed
    # test's distance: another batch composition).
    chosen = sorted(posted)[:: max(1, len(posted) // 6)]
    computed = node.client.poc.compute_artifacts(
        BLOCK_HASH,
        PUBLIC_KEY,
        model.served_model_name,
        SEQ_LEN,
        chosen,
        timeout=CALL_TIMEOUT_SECONDS,
    )
    pairs = [pair for batch in computed for pair in decode_batch(batch)]
    assert [nonce for nonce, _ in pairs] == chosen
    distances = [
        float(np.linalg.norm(vector.astype(np.float32) - vector_from_b64(posted[nonce]).astype(np.float32)))
        for nonce, vector in pairs
    ]
    assert max(distances) <= 0.02, distances
