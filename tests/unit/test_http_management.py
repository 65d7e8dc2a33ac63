"""The management API (server.http) against the server's own objects (the round control, the priority gate, the
admission, the engine instances, the health service), with a stand-in for the engine alone: rounds started as
PocService starts them are the rounds `/api/v1/state` reports and `/api/v1/stop` stops."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import grpc
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry

from engine_ext.engine_calls import EngineCalls
from server.core.errors import Reason, ServiceError
from server.core.health import HealthService
from server.core.instances import EngineInstances
from server.http.app import PocRouting, management_app
from server.http.errors import HTTP_STATUS_OF_CODE
from server.http.generate_jobs import JobEngine
from server.http.generate_queue import GenerateQueue
from server.http.node_routes import NodeVersions
from server.http.node_state import NodeMode, NodeState, ServedModel
from server.http.options import DEFAULT_MLNODE_VERSION, FraudThreshold
from server.poc.batches.round_params import PocLimits, RoundParameters
from server.poc.delivery.callback_stream import CallbackSink
from server.poc.delivery.callbacks import CallbackIdentity
from server.poc.fanout.artifact_hub import ArtifactHub
from server.poc.gate.admission import Admission
from server.poc.round.mining_round import RoundState
from server.poc.round.round_control import RoundControl
from server.translation.engine_failures import engine_failure
from tests.unit.test_mining_round import PARAMS, StandInEngine, instances_of

SERVED = ServedModel(name="Qwen/Qwen3-0.6B", path="/models/qwen3-0.6b")
VERSIONS = NodeVersions(mlnode=DEFAULT_MLNODE_VERSION, vllm="0.25.1", poc_validation_inference=True)
MAX_BODY = 4096
HTTP_PORT = 8080
LIMITS = PocLimits(SERVED.name, max_model_len=4096, hidden_size=1024, max_num_batched_tokens=8192, max_num_seqs=64)
INFERENCE = "gonka.mlnode.v1.InferenceService"
POC = "gonka.mlnode.v1.PocService"


@dataclass
class Node:
    client: TestClient
    app: FastAPI
    state: NodeState
    control: RoundControl
    admission: Admission
    engines: list[StandInEngine]
    instances: EngineInstances
    # The parameters of each round the round control asked a callback for (the artifacts' receiver).
    callbacks: list[RoundParameters]
    jobs: GenerateQueue
    # What the generate jobs delivered: (url, /validated body), and (url, identity, request_id, nonces) per batch.
    validated: list[tuple[str, dict]]
    generated: list[tuple[str, CallbackIdentity, str, list[int]]]


class RecordedSink:
    def __init__(self, url: str, identity: CallbackIdentity, request_id: str, into: list) -> None:
        self._fields = (url, identity, request_id)
        self._into = into

    def add(self, nonces: Sequence[int], vectors: bytes) -> None:
        self._into.append((*self._fields, list(nonces)))

    def finish(self) -> None:
        pass


@contextmanager
def node_of(
    *engines: StandInEngine,
    raise_server_exceptions: bool = True,
    fraud_threshold: FraudThreshold = FraudThreshold.FLEET,
    metrics: CollectorRegistry | None = None,
    stream: CallbackSink | None = None,
) -> Iterator[Node]:
    """`metrics`: the registry /api/v1/metrics serves (an empty one by default). `stream`: the pull stream's sink
    (none by default: not served)."""
    engines = engines or (StandInEngine(),)
    metrics = metrics or CollectorRegistry()
    instances = instances_of(*engines)
    admission = Admission()
    callbacks: list[RoundParameters] = []

    def no_callback(_round_id: str, params: RoundParameters) -> None:
        callbacks.append(params)

    control = RoundControl(
        instances,
        admission.gate,
        ArtifactHub(1000, 60),
        HealthService(),
        (INFERENCE,),
        POC,
        no_callback,
        lambda: admission.is_open,
    )
    state = NodeState(control, instances, SERVED)
    limits = dataclasses.replace(LIMITS, instances=len(engines))
    validated: list[tuple[str, dict]] = []
    generated: list[tuple[str, CallbackIdentity, str, list[int]]] = []
    jobs = GenerateQueue(
        control.wait_until_idle, state.validation_job, lambda error: engine_failure(error, None, admission)
    )
    engine = JobEngine(
        instances,
        limits,
        lambda url, body: validated.append((url, body)),
        lambda url, identity, _k, request_id: RecordedSink(url, identity, request_id, generated),
    )
    routing = PocRouting(control, limits, HTTP_PORT, jobs, engine, fraud_threshold, stream)
    app = management_app(state, instances, admission, VERSIONS, MAX_BODY, routing, metrics)
    with TestClient(app, raise_server_exceptions=raise_server_exceptions) as client:
        yield Node(
            client, app, state, control, admission, list(engines), instances, callbacks, jobs, validated, generated
        )
        client.portal.call(jobs.close)


def error_of(response) -> dict:
    assert response.headers["content-type"] == "application/json"
    error = response.json()["error"]
    assert error["code"] == response.status_code and error["message"]
    return error


def test_a_node_starts_in_inference_with_the_deployed_state_fields() -> None:
    with node_of() as node:
        response = node.client.get("/api/v1/state")
    assert response.status_code == 200
    assert response.json() == {
        "state": "INFERENCE",
        "version": "3.1.0",
        "poc_validation_inference": True,
        "poc_status": "IDLE",
        "inference_healthy": True,
        "loaded_model": SERVED.path,
    }


def test_every_path_answers_under_a_version_prefix_too() -> None:
    with node_of() as node:
        for prefix in ("/v3.0.8", "/v2", "/3.1.0", "/v3.0.14-rc1"):
            assert node.client.get(f"{prefix}/api/v1/state").json()["state"] == "INFERENCE"
            assert node.client.get(f"{prefix}/health").status_code == 200
            assert node.client.get(f"{prefix}/api/v1/versions").status_code == 200
        assert node.client.post("/v3.0.8/api/v1/stop").json() == {"status": "OK"}
        assert node.client.get("/api/v1/state").json()["state"] == "STOPPED"
        # A first segment that is no version, or a version before a path the API does not have, is no prefix.
        assert error_of(node.client.get("/latest/api/v1/state"))["type"] == "NOT_FOUND"
        assert node.client.get("/v3.0.8/v3.0.8/api/v1/state").status_code == 404
        assert node.client.get("/v1/models").status_code == 404


def test_versions_answer_on_the_current_and_the_older_path() -> None:
    with node_of() as node:
        for path in ("/api/v1/versions", "/api/v1/inference/pow/versions"):
            response = node.client.get(path)
            assert response.status_code == 200
            assert response.json() == {"vllm_version": "0.25.1", "poc_validation_inference": True}


def test_stop_then_inference_up_by_either_name_of_the_served_model() -> None:
    with node_of() as node:
        assert node.client.post("/api/v1/stop").json() == {"status": "OK"}
        assert node.client.get("/api/v1/state").json()["state"] == "STOPPED"
        assert not node.state.serves_inference
        # The engine stays loaded: the node is live and ready.
        assert node.client.get("/livez").status_code == 200 and node.client.get("/readyz").status_code == 200
        for model in (SERVED.path, SERVED.name):
            response = node.client.post(
                "/api/v1/inference/up", json={"model": model, "dtype": "auto", "additional_args": ["--x"]}
            )
            assert response.status_code == 200 and response.json() == {"status": "OK"}
            assert node.client.get("/api/v1/state").json()["state"] == "INFERENCE"
        # inference/up on a node that serves already is no error.
        assert node.client.post("/api/v1/inference/up", json={"model": SERVED.name}).status_code == 200
        assert node.state.serves_inference


def test_inference_up_with_another_model_is_409_logged_and_changes_nothing(caplog: pytest.LogCaptureFixture) -> None:
    with node_of() as node:
        node.client.post("/api/v1/stop")
        with caplog.at_level(logging.WARNING, logger="server.http.node_state"):
            response = node.client.post("/api/v1/inference/up", json={"model": "deepseek-ai/DeepSeek-V4"})
        assert response.status_code == 409
        error = error_of(response)
        assert error["type"] == "MODEL_MISMATCH" and error["param"] == "model"
        assert SERVED.name in error["message"] and "deepseek-ai/DeepSeek-V4" in error["message"]
        assert "inference/up refused" in caplog.text and "deepseek-ai/DeepSeek-V4" in caplog.text
        assert node.client.get("/api/v1/state").json()["state"] == "STOPPED"


def test_json_bodies_are_read_whatever_their_content_type() -> None:
    body = b'{"model": "/models/qwen3-0.6b"}'
    with node_of() as node:
        for headers in ({}, {"content-type": "text/plain"}, {"content-type": "application/x-www-form-urlencoded"}):
            node.client.post("/api/v1/stop")
            response = node.client.post("/api/v1/inference/up", content=body, headers=headers)
            assert response.status_code == 200, (headers, response.text)
            assert node.state.mode is NodeMode.INFERENCE


@pytest.mark.parametrize(
    ("body", "status", "error_type", "param"),
    [
        (b'{"model": ', 400, "INVALID_JSON", None),
        (b"", 400, "INVALID_JSON", None),
        (b"model=x", 400, "INVALID_JSON", None),
        (b'["/models/qwen3-0.6b"]', 422, "INVALID_FIELD", None),
        (b"{}", 422, "INVALID_FIELD", "model"),
        (b'{"model": 5}', 422, "INVALID_FIELD", "model"),
        (b'{"model": null}', 422, "INVALID_FIELD", "model"),
        (b'{"model": "m", "additional_args": "--x"}', 422, "INVALID_FIELD", "additional_args"),
        (b'{"model": "m", "additional_args": [1]}', 422, "INVALID_FIELD", "additional_args.0"),
        (b'{"model": "m", "dtype": 16}', 422, "INVALID_FIELD", "dtype"),
    ],
)
def test_a_bad_body_is_a_4xx_with_a_json_error_naming_the_field(
    body: bytes, status: int, error_type: str, param: str | None
) -> None:
    with node_of() as node:
        response = node.client.post("/api/v1/inference/up", content=body)
        assert response.status_code == status, response.text
        error = error_of(response)
        assert (error["type"], error["param"]) == (error_type, param)
        # The server serves on, and the state did not move.
        assert node.client.get("/api/v1/state").json()["state"] == "INFERENCE"


def test_a_body_over_the_bound_is_413_by_its_length_or_as_it_arrives() -> None:
    padded = b'{"model": "/models/qwen3-0.6b"' + b" " * (MAX_BODY - 40) + b"}"
    assert len(padded) <= MAX_BODY
    huge = b'{"model": "' + b"x" * MAX_BODY + b'"}'

    def chunks(data: bytes) -> Iterator[bytes]:
        for start in range(0, len(data), 1000):
            yield data[start : start + 1000]

    with node_of() as node:
        assert node.client.post("/api/v1/inference/up", content=padded).status_code == 200
        stated = node.client.post("/api/v1/inference/up", content=huge)
        streamed = node.client.post("/api/v1/inference/up", content=chunks(huge))
        assert "content-length" not in {k.lower() for k in streamed.request.headers}
        for response in (stated, streamed):
            assert response.status_code == 413
            assert error_of(response)["type"] == "REQUEST_TOO_LARGE"
        assert node.client.get("/api/v1/state").status_code == 200


def test_unknown_paths_and_methods_are_json_errors() -> None:
    with node_of() as node:
        assert error_of(node.client.get("/api/v1/nothing-here"))["type"] == "NOT_FOUND"
        response = node.client.get("/api/v1/stop")
        assert response.status_code == 405 and error_of(response)["type"] == "METHOD_NOT_ALLOWED"


def test_a_round_started_as_pocservice_starts_it_is_pow_and_stop_ends_it() -> None:
    with node_of() as node:
        mining = node.client.portal.call(node.control.start, PARAMS)
        state = node.client.get("/api/v1/state").json()
        assert (state["state"], state["poc_status"]) == ("POW", "GENERATING")
        assert node.admission.gate.closed
        while mining.nonces_produced == 0:
            time.sleep(0.01)
        assert node.client.post("/api/v1/stop").json() == {"status": "OK"}
        # stop answers once the round has ended and inference is admitted again.
        assert mining.state is RoundState.STOPPED and mining.nonces_produced > 0
        assert not node.admission.gate.closed and not node.engines[0].paused
        state = node.client.get("/api/v1/state").json()
        assert (state["state"], state["poc_status"]) == ("STOPPED", "IDLE")


def test_inference_up_with_the_served_model_ends_a_running_round() -> None:
    with node_of() as node:
        mining = node.client.portal.call(node.control.start, PARAMS)
        assert node.client.post("/api/v1/inference/up", json={"model": SERVED.name}).status_code == 200
        assert mining.state is RoundState.STOPPED and not node.admission.gate.closed
        assert node.client.get("/api/v1/state").json()["state"] == "INFERENCE"
        # Another model leaves a running round alone.
        mining = node.client.portal.call(node.control.start, PARAMS)
        assert node.client.post("/api/v1/inference/up", json={"model": "other"}).status_code == 409
        assert node.control.running is mining
        node.client.post("/api/v1/stop")


def test_a_validation_job_is_pow_validating_while_it_runs() -> None:
    with node_of() as node:
        with node.state.validation_job():
            state = node.client.get("/api/v1/state").json()
            assert (state["state"], state["poc_status"]) == ("POW", "VALIDATING")
        assert node.client.get("/api/v1/state").json()["state"] == "INFERENCE"


def test_health_follows_the_engines_and_readiness_the_shutdown_too() -> None:
    with node_of(StandInEngine(), StandInEngine()) as node:
        for path in ("/health", "/livez"):
            response = node.client.get(path)
            assert response.status_code == 200
            assert response.json() == {
                "status": "healthy",
                "state": "INFERENCE",
                "instances": [{"index": 0, "state": "serving"}, {"index": 1, "state": "serving"}],
            }
        assert node.client.get("/readyz").json() == {"ready": True}
        node.engines[0].errored = True
        assert node.client.get("/livez").status_code == 200  # the other instance serves on
        node.engines[1].errored = True
        for path in ("/health", "/livez", "/readyz"):
            assert node.client.get(path).status_code == 503
        assert node.client.get("/health").json()["status"] == "unhealthy"
        state = node.client.get("/api/v1/state").json()
        assert (state["poc_status"], state["inference_healthy"]) == ("NO_BACKENDS", False)

    with node_of() as node:
        node.admission.close()
        assert node.client.get("/livez").status_code == 200
        response = node.client.get("/readyz")
        assert response.status_code == 503 and response.json() == {"ready": False}


def test_a_hung_engine_call_makes_the_node_unhealthy_until_it_is_answered() -> None:
    now = [0.0]
    engine = StandInEngine()
    engine.calls = EngineCalls(timeout_seconds=3600, stuck_after_seconds=120, clock=lambda: now[0])
    with node_of(engine) as node:
        answer = node.client.portal.call(asyncio.Event)
        pending = node.client.portal.start_task_soon(engine.calls.call, "poc_forward", answer.wait())
        assert node.client.get("/livez").status_code == 200
        now[0] = 121.0
        response = node.client.get("/livez")
        assert response.status_code == 503 and response.json()["instances"] == [{"index": 0, "state": "stuck"}]
        node.client.portal.call(answer.set)
        pending.result(timeout=5)
        assert node.client.get("/livez").status_code == 200


def test_the_clock_probe_answers_204_with_two_nanosecond_stamps() -> None:
    with node_of() as node:
        response = node.client.get("/api/v1/clock")
    assert response.status_code == 204 and response.content == b""
    received, sent = int(response.headers["X-Server-Recv-Ns"]), int(response.headers["X-Server-Send-Ns"])
    assert 1_700_000_000 * 10**9 < received <= sent


def test_service_errors_and_unexpected_failures_leave_as_json_errors() -> None:
    """The mapping every route shares: a ServiceError from the shared objects keeps its reason, field and retry
    delay; a bad path parameter is 422; anything else is a 500 that names no internals beyond the error."""
    with node_of(raise_server_exceptions=False) as node:

        @node.app.get("/test/unavailable")
        async def unavailable() -> None:
            raise ServiceError(
                grpc.StatusCode.UNAVAILABLE, Reason.POC_IN_PROGRESS, "a round runs", retry_after_seconds=4.2
            )

        @node.app.get("/test/conflict")
        async def conflict() -> None:
            raise ServiceError(grpc.StatusCode.ALREADY_EXISTS, Reason.ROUND_ALREADY_RUNNING, "a round runs", field="x")

        @node.app.get("/test/count")
        async def count(n: int) -> None:
            return None

        @node.app.get("/test/boom")
        async def boom() -> None:
            raise RuntimeError("boom")

        response = node.client.get("/test/unavailable")
        assert response.status_code == 503 and response.headers["Retry-After"] == "5"
        assert error_of(response)["type"] == "POC_IN_PROGRESS"
        response = node.client.get("/test/conflict")
        assert response.status_code == 409 and error_of(response)["param"] == "x"
        response = node.client.get("/test/count", params={"n": "many"})
        assert response.status_code == 422 and error_of(response)["param"] == "n"
        response = node.client.get("/test/boom")
        assert response.status_code == 500 and error_of(response)["type"] == "INTERNAL_ERROR"


@pytest.mark.parametrize(("code", "status"), [*HTTP_STATUS_OF_CODE.items(), (grpc.StatusCode.INTERNAL, 500)])
def test_every_grpc_code_of_the_shared_checks_has_its_http_status(code: grpc.StatusCode, status: int) -> None:
    with node_of() as node:

        @node.app.get("/test/refused")
        async def refused() -> None:
            raise ServiceError(code, Reason.INVALID_FIELD, "refused", field="f")

        response = node.client.get("/test/refused")
        assert response.status_code == status
        assert error_of(response) == {"message": "refused", "type": "INVALID_FIELD", "param": "f", "code": status}
