"""The management API (--http-port) driven by a Go program in the shape of the network's API node's client
(clients/go/cmd/apinode-check: typed structs with the spec's JSON names, net/http as the API node uses it, the
management POSTs without a Content-Type), written from the spec alone, against a real server and a real callback
receiver: the state machine through a mining round (init/generate, artifacts at {url}/generated, status, pow/stop),
stop and inference/up; and bad input (wrong types, an unknown model) answered 4xx with the JSON error body the Go
client decodes, the server serving on."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gonka.mlnode.client import InferenceClient
from tests.support.go_example import build_go_command
from tests.support.http_receiver import HttpReceiver
from tests.support.server_process import SERVER_LAYER_FLAGS, ServerProcess, free_port, start_server

CALL_TIMEOUT_SECONDS = 120.0
NODE_ID, NODE_COUNT = 2, 3
BLOCK_HASH, BLOCK_HEIGHT, PUBLIC_KEY, SEQ_LEN = "0x" + "5e" * 32, 91, "apinode-check-key", 64
# The API node's callback base: {poc_callback_url}/v2/poc-batches/{escaped model}.
CALLBACK_BASE = "/v2/poc-batches/qwen3-tiny"


@dataclass
class GoNode:
    server: ServerProcess
    http_port: int
    binary: Path
    model_path: str

    def run(self, *args: str, prefix: str = "/v3.1.0") -> tuple[int, dict]:
        """The Go program's exit code and its one JSON line."""
        ran = subprocess.run(
            [str(self.binary), "--node", f"http://127.0.0.1:{self.http_port}{prefix}", *args],
            capture_output=True,
            text=True,
            timeout=CALL_TIMEOUT_SECONDS,
            check=False,
        )
        assert ran.returncode in (0, 1) and ran.stdout, (ran.returncode, ran.stdout, ran.stderr)
        return ran.returncode, json.loads(ran.stdout)

    def ok(self, *args: str) -> dict:
        code, answer = self.run(*args)
        assert code == 0, answer
        return answer

    def refused(self, *args: str) -> dict:
        code, answer = self.run(*args)
        assert code == 1, answer
        error = answer["error"]
        # The deployed error shape, as the Go struct decoded it.
        assert error["code"] == answer["http_status"] and error["message"] and error["type"], answer
        return answer


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory, model_dir: Path) -> Iterator[GoNode]:
    binary = build_go_command(tmp_path_factory.mktemp("go-apinode"), "apinode-check")
    http_port = free_port()
    flags = ["--http-port", str(http_port), "--poc-callback-interval-s", "0.5", *SERVER_LAYER_FLAGS]
    server = start_server(tmp_path_factory.mktemp("go-apinode") / "server.log", flags)
    try:
        with InferenceClient(server.target) as client:
            model_path = client.model_info().model_path
        yield GoNode(server, http_port, binary, model_path)
    finally:
        exit_code = server.stop()
    assert exit_code == 0, f"server exited with {exit_code} on SIGTERM:\n{server.log_tail()}"


def state(node: GoNode) -> tuple[str, str]:
    answer = node.ok("state")
    return answer["state"], answer["poc_status"]


def test_a_full_cycle_as_the_api_node_drives_it(node: GoNode) -> None:
    first = node.ok("state")
    assert first == {
        "state": "INFERENCE",
        "version": "3.1.0",
        "poc_validation_inference": True,
        "poc_status": "IDLE",
        "inference_healthy": True,
        "loaded_model": node.model_path,
    }
    versions = node.ok("versions")
    assert versions["vllm_version"] and versions["poc_validation_inference"] is True
    assert node.ok("health") == {"healthy": True}
    clock = node.ok("clock")
    assert 0 < clock["recv_ns"] <= clock["send_ns"]

    with HttpReceiver() as receiver:
        started = node.ok(
            "init-generate",
            *("--block-hash", BLOCK_HASH, "--block-height", str(BLOCK_HEIGHT), "--public-key", PUBLIC_KEY),
            *("--node-id", str(NODE_ID), "--node-count", str(NODE_COUNT)),
            *("--model", node.model_path, "--seq-len", str(SEQ_LEN), "--url", receiver.url + CALLBACK_BASE),
        )
        try:
            assert started == {
                "status": "OK",
                "backends": 1,
                "n_groups": 1,
                "results": [{"port": node.http_port, "status": "OK"}],
                "errors": None,
            }
            assert receiver.wait_for(lambda r: len(r.received(CALLBACK_BASE + "/generated")) >= 1, CALL_TIMEOUT_SECONDS)
            assert node.ok("status") == {
                "status": "GENERATING",
                "backends": [{"port": node.http_port, "status": "GENERATING"}],
            }
            assert state(node) == ("POW", "GENERATING")
        finally:
            stopped = node.ok("pow-stop")
        assert stopped == {"status": "OK", "results": [{"port": node.http_port, "status": "stopped"}], "errors": None}
        batches = receiver.received(CALLBACK_BASE + "/generated")
    for batch in batches:
        assert (batch["public_key"], batch["block_hash"], batch["block_height"]) == (
            PUBLIC_KEY,
            BLOCK_HASH,
            BLOCK_HEIGHT,
        )
        assert batch["artifacts"] and all(a["nonce"] % NODE_COUNT == NODE_ID for a in batch["artifacts"])
    assert state(node) == ("INFERENCE", "IDLE")

    assert node.ok("stop") == {"status": "OK"}
    assert state(node) == ("STOPPED", "IDLE")
    assert node.ok("inference-up", "--model", node.model_path) == {"status": "OK"}
    assert state(node) == ("INFERENCE", "IDLE")


def test_bad_input_is_a_4xx_json_error_the_go_client_decodes_and_the_node_serves_on(node: GoNode) -> None:
    unknown = node.refused("inference-up", "--model", "Qwen/Not-This-Model")
    assert (unknown["http_status"], unknown["error"]["type"], unknown["error"]["param"]) == (
        409,
        "MODEL_MISMATCH",
        "model",
    )
    other_model = node.refused(
        "init-generate",
        *("--block-hash", BLOCK_HASH, "--public-key", PUBLIC_KEY, "--seq-len", str(SEQ_LEN)),
        *("--model", "Qwen/Not-This-Model"),
    )
    assert 400 <= other_model["http_status"] < 500 and other_model["error"]["param"] == "params.model", other_model
    wrong_types = [
        ("/api/v1/inference/up", '{"model": 5}', "model"),
        ("/api/v1/inference/pow/init/generate", json.dumps({"block_hash": BLOCK_HASH, "block_height": "91"}), None),
        ("/api/v1/inference/pow/init/generate", '{"params": {"model": "m", "seq_len": 64, "batch": 1}}', None),
    ]
    for path, body, param in wrong_types:
        answer = node.refused("send", "--path", path, "--body", body)
        assert answer["http_status"] == 422, answer
        if param is not None:
            assert answer["error"]["param"] == param, answer
    not_json = node.refused("send", "--path", "/api/v1/inference/up", "--body", "{model")
    assert (not_json["http_status"], not_json["error"]["type"]) == (400, "INVALID_JSON")
    assert state(node) == ("INFERENCE", "IDLE")
