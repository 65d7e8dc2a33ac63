"""`pow/init/generate`, `pow/status` and `pow/stop` against the server's own round control, priority gate and
admission (a stand-in for the engine alone): the API node's body starts the round PocService would start, with its
callback URL for `{url}/generated`; a re-sent init/generate while the round mines is a 200 that names the backend
already generating; pow/stop ends the round and leaves the node's mode alone."""

from __future__ import annotations

import json
import time

from server.http.pow_routes import ALREADY_GENERATING, NO_BACKENDS_TO_STOP
from server.poc.round.mining_round import RoundState
from tests.unit.test_http_management import HTTP_PORT, SERVED, error_of, node_of
from tests.unit.test_mining_round import K, StandInEngine

INIT_PATH = "/api/v1/inference/pow/init/generate"
URL = "http://api-node:9100/v2/poc-batches/Qwen%252FQwen3-0.6B"
# PoCInitGenerateRequestV2 as the Go client marshals it, with no batch_size (spec section 1.1); k_dim, which it
# omits for the network's 12 (tests/unit/test_http_pow_requests.py), is the stand-in engine's.
PARAMS = {"model": SERVED.name, "seq_len": 16, "k_dim": K}
INIT = {
    "block_hash": "0xabc",
    "block_height": 1234,
    "public_key": "pk",
    "node_id": 2,
    "node_count": 5,
    "params": PARAMS,
    "url": URL,
    "poc_stronger_rng": True,
}


def test_init_generate_starts_the_round_with_the_callback_url_and_pow_stop_ends_it() -> None:
    with node_of() as node:
        response = node.client.post(INIT_PATH, json=INIT)
        assert response.status_code == 200, response.text
        assert response.json() == {
            "status": "OK",
            "backends": 1,
            "n_groups": 1,
            "results": [{"port": HTTP_PORT, "status": "OK"}],
            "errors": None,
        }
        mining = node.control.running
        assert mining is not None and node.admission.gate.closed
        # The round control asked for the callback of this round: artifacts go to {url}/generated.
        (params,) = node.callbacks
        assert params.callback_url == URL
        assert (params.node_id, params.node_count, params.block_height) == (2, 5, 1234)
        assert (params.artifacts.public_key, params.artifacts.stronger_rng, params.artifacts.k_dim) == ("pk", True, K)
        state = node.client.get("/api/v1/state").json()
        assert (state["state"], state["poc_status"]) == ("POW", "GENERATING")
        status = node.client.get("/api/v1/inference/pow/status")
        assert status.json() == {
            "status": "GENERATING",
            "backends": [{"port": HTTP_PORT, "instance": 0, "status": "GENERATING"}],
        }
        while mining.nonces_produced == 0 and mining.state is RoundState.GENERATING:
            time.sleep(0.01)
        assert mining.nonces_produced > 0, mining.failure
        stopped = node.client.post("/v3.1.0/api/v1/inference/pow/stop", json={})
        assert stopped.json() == {"status": "OK", "results": [{"port": HTTP_PORT, "status": "stopped"}]}
        assert mining.state is RoundState.STOPPED and not node.admission.gate.closed
        assert node.client.get("/api/v1/inference/pow/status").json()["status"] == "IDLE"
        assert node.client.get("/api/v1/state").json()["state"] == "INFERENCE"


def test_a_resent_init_generate_is_200_naming_the_backend_already_generating() -> None:
    with node_of() as node:
        assert node.client.post(INIT_PATH, json=INIT).status_code == 200
        mining = node.control.running
        again = node.client.post(INIT_PATH, content=json.dumps(INIT).encode())
        assert again.status_code == 200
        assert again.json() == {
            "status": "OK",
            "backends": 1,
            "n_groups": 1,
            "results": [],
            "errors": [{"port": HTTP_PORT, "error": ALREADY_GENERATING}],
        }
        assert node.control.running is mining and len(node.callbacks) == 1
        node.client.post("/api/v1/inference/pow/stop")


def test_the_model_may_be_named_by_its_path_as_the_api_node_names_it() -> None:
    with node_of() as node:
        response = node.client.post(INIT_PATH, json={**INIT, "params": {**PARAMS, "model": SERVED.path}})
        assert response.status_code == 200, response.text
        assert node.callbacks[0].model == SERVED.name
        node.client.post("/api/v1/inference/pow/stop")


def test_every_instance_is_a_backend_and_a_nonce_group() -> None:
    with node_of(StandInEngine(), StandInEngine()) as node:
        response = node.client.post(INIT_PATH, json=INIT).json()
        assert (response["backends"], response["n_groups"]) == (2, 2)
        assert node.callbacks[0].group_count == 2
        backends = node.client.get("/api/v1/inference/pow/status").json()["backends"]
        assert [backend["instance"] for backend in backends] == [0, 1]
        assert len(node.client.post("/api/v1/inference/pow/stop").json()["results"]) == 2


def test_init_generate_refusals_are_json_errors_and_start_nothing() -> None:
    with node_of() as node:
        another = node.client.post(INIT_PATH, json={**INIT, "params": {"model": "other/model", "seq_len": 16}})
        assert another.status_code == 409 and error_of(another)["param"] == "params.model"
        outside = node.client.post(INIT_PATH, json={**INIT, "node_id": 5})
        assert outside.status_code == 400 and error_of(outside)["param"] == "node_id"
        typed = node.client.post(INIT_PATH, json={**INIT, "block_height": "1234"})
        assert typed.status_code == 422 and error_of(typed)["param"] == "block_height"
        unknown = node.client.post(INIT_PATH, json={**INIT, "params": {**PARAMS, "decode": True}})
        assert unknown.status_code == 422 and error_of(unknown)["param"] == "params.decode"
        assert node.client.post(INIT_PATH, content=b"{").status_code == 400
        assert node.control.running is None and node.callbacks == []
        node.admission.close()
        shutting_down = node.client.post(INIT_PATH, json=INIT)
        assert shutting_down.status_code == 503 and error_of(shutting_down)["code"] == 503
        assert node.control.running is None


def test_pow_stop_leaves_the_mode_and_answers_with_no_round_or_no_backend() -> None:
    with node_of(StandInEngine(), StandInEngine()) as node:
        assert node.client.post("/api/v1/stop").status_code == 200
        assert node.client.post(INIT_PATH, json=INIT).status_code == 200
        assert node.client.get("/api/v1/state").json()["state"] == "POW"
        node.client.post("/api/v1/inference/pow/stop")
        assert node.client.get("/api/v1/state").json()["state"] == "STOPPED"
        # Nothing running: each living backend is stopped all the same.
        assert node.client.post("/api/v1/inference/pow/stop").json()["results"] == [
            {"port": HTTP_PORT, "status": "stopped"},
            {"port": HTTP_PORT, "status": "stopped"},
        ]
        for engine in node.engines:
            engine.errored = True
        node.client.get("/livez")
        assert node.client.post("/api/v1/inference/pow/stop").json() == {
            "status": "OK",
            "message": NO_BACKENDS_TO_STOP,
        }
        assert node.client.get("/api/v1/inference/pow/status").json() == {"status": "NO_BACKENDS", "backends": []}
