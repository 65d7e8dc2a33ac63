"""The management API's operational endpoints on a real server (--http-port, no --metrics-port): the server's
metrics at /api/v1/metrics, vLLM's scheduler heartbeat among them; the endpoints this server does not build,
answered as the API node reads their absence; GPU information (404 on a host without an NVIDIA driver); and
liveness that reflects a hung engine: its engine core stopped with SIGSTOP while a request waits on it turns
/livez 503 after the hang grace, and SIGCONT brings it back, the request served.

The hang test stops the engine: it runs last in this module."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from engine_ext.gpu_devices import NvmlUnavailable, read_gpu_devices
from gonka.mlnode.client import InferenceClient
from gonka.mlnode.v1 import inference_pb2 as pb
from tests.support.server_process import SERVER_LAYER_FLAGS, ServerProcess, free_port, start_server

HANG_GRACE_SECONDS = 2.0
# The API node's budget for a metrics read.
METRICS_BUDGET_SECONDS = 5.0
PROMPT_IDS = [9707, 1879, 11, 419, 374, 264, 1273]
HEARTBEAT = "vllm:iteration_tokens_total_count"


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory, model_dir: Path) -> Iterator[tuple[ServerProcess, httpx.Client]]:
    http_port = free_port()
    flags = ["--http-port", str(http_port), "--engine-hang-grace", str(HANG_GRACE_SECONDS), *SERVER_LAYER_FLAGS]
    server = start_server(tmp_path_factory.mktemp("http-ops") / "server.log", flags)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{http_port}", timeout=30) as api:
            yield server, api
    finally:
        exit_code = server.stop()
    assert exit_code == 0, f"server exited with {exit_code} on SIGTERM:\n{server.log_tail()}"


def scrape(api: httpx.Client) -> dict[str, float]:
    """Each sample's value by name, summed over labels."""
    response = api.get("/api/v1/metrics", timeout=METRICS_BUDGET_SECONDS)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            values[sample.name] = values.get(sample.name, 0.0) + sample.value
    return values


def test_metrics_carry_the_scheduler_heartbeat_and_the_servers_own(node: tuple[ServerProcess, httpx.Client]) -> None:
    server, api = node
    before = scrape(api)
    with InferenceClient(server.target) as client:
        client.generate(token_ids=PROMPT_IDS, max_tokens=4, ignore_eos=True, temperature=0.0)
        client.server_status()
    after = scrape(api)
    # One engine step per token at least: the heartbeat the deployed node's liveness reads.
    assert after[HEARTBEAT] >= before.get(HEARTBEAT, 0.0) + 4, (before.get(HEARTBEAT), after[HEARTBEAT])
    assert after["grpc_server_handled_total"] > before.get("grpc_server_handled_total", 0.0)
    assert after["mlnode_instance_state"] == 1.0 and "process_cpu_seconds_total" in after


def test_unbuilt_endpoints_answer_as_the_api_node_reads_their_absence(
    node: tuple[ServerProcess, httpx.Client],
) -> None:
    _, api = node
    unbuilt = [
        ("POST", "/api/v1/models/status", 404),
        ("POST", "/api/v1/models/download", 404),
        ("DELETE", "/api/v1/models", 404),
        ("GET", "/api/v1/models/list", 404),
        ("GET", "/api/v1/models/space", 404),
        ("POST", "/api/v1/embed", 404),
        ("GET", "/api/v1/encrypted/identity", 503),
    ]
    for method, path, status in unbuilt:
        response = api.request(method, "/v3.1.0" + path, json={"hf_repo": "Qwen/Qwen3-0.6B", "text": "hello"})
        assert response.status_code == status, (path, response.text)
        error = response.json()["error"]
        assert error["code"] == status and error["message"], (path, error)
    assert api.get("/livez").status_code == 200


def test_gpu_information_is_what_nvml_reads_here(node: tuple[ServerProcess, httpx.Client]) -> None:
    _, api = node
    try:
        count: int | None = len(read_gpu_devices())
    except NvmlUnavailable:
        count = None
    devices, driver = api.get("/api/v1/gpu/devices"), api.get("/api/v1/gpu/driver")
    if count is None:
        assert (devices.status_code, devices.json()["error"]["type"]) == (404, "NO_GPU")
        assert (driver.status_code, driver.json()["error"]["type"]) == (404, "NO_GPU")
    else:
        assert devices.status_code == 200 and devices.json()["count"] == count
        assert driver.status_code == 200 and driver.json()["driver_version"]


def engine_core_pid(server: ServerProcess) -> int:
    with InferenceClient(server.target) as client:
        status = client.server_status(include_engine_processes=True)
    return next(process.pid for process in status.engine_processes if process.role == pb.EngineProcess.ROLE_ENGINE_CORE)


def wait_for_livez(api: httpx.Client, status: int, timeout: float) -> tuple[float, dict]:
    """Seconds until /livez answers `status`, and its body."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        response = api.get("/livez", timeout=5)
        if response.status_code == status:
            return time.monotonic() - started, response.json()
        time.sleep(0.2)
    raise AssertionError(f"/livez did not answer {status} within {timeout} s")


def test_a_hung_engine_turns_livez_503_only_while_work_waits_and_recovers(
    node: tuple[ServerProcess, httpx.Client],
) -> None:
    server, api = node
    pid = engine_core_pid(server)
    result: dict[str, object] = {}

    def generate() -> None:
        with InferenceClient(server.target) as client:
            response = client.generate(token_ids=PROMPT_IDS, max_tokens=3, ignore_eos=True, timeout=120)
            result["finish"] = response.first.finish_reason

    os.kill(pid, signal.SIGSTOP)  # alive, stepping nothing: a hung engine core
    sender = threading.Thread(target=generate)
    try:
        # An idle engine that does not step is not hung: nothing waits on it.
        time.sleep(HANG_GRACE_SECONDS + 2)
        assert api.get("/livez").status_code == 200
        sender.start()
        waited, body = wait_for_livez(api, 503, timeout=HANG_GRACE_SECONDS + 15)
        assert waited >= HANG_GRACE_SECONDS, waited
        assert body == {"status": "unhealthy", "state": "INFERENCE", "instances": [{"index": 0, "state": "stuck"}]}
        assert api.get("/health").status_code == 503 and api.get("/readyz").status_code == 503
        assert api.get("/api/v1/state").json()["inference_healthy"] is False
        assert "finish" not in result
    finally:
        os.kill(pid, signal.SIGCONT)
    wait_for_livez(api, 200, timeout=15)
    sender.join(timeout=60)
    assert result.get("finish") == "length", result
    assert api.get("/readyz").status_code == 200
    assert "no step progress" in server.log_path.read_text(), server.log_tail()
