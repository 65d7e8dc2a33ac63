"""The servers compared: each one's command, environment, readiness probe and served context."""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any

import grpc

from benchmarks.serving.errors import BenchmarkError
from benchmarks.serving.server_logs import short_tail
from benchmarks.serving.settings import ENGINE_ENV, SERVED_MODEL_NAME, Settings
from gonka.mlnode.v1 import inference_pb2 as pb
from tests.support.server_process import ServerProcess, wait_until_serving

PROJECT_PLUGIN = "gonka_mlnode"
STARTUP_TIMEOUT_SECONDS = 600.0


def server_environment(stock_vllm: bool) -> dict[str, str]:
    env = dict(os.environ)
    env.update(ENGINE_ENV)
    if stock_vllm:
        # The project's vLLM plugin is installed in this virtualenv; keep it out of stock vLLM.
        others = [p.name for p in entry_points(group="vllm.general_plugins") if p.name != PROJECT_PLUGIN]
        env["VLLM_PLUGINS"] = ",".join(others)
    return env


def server_command(kind: str, settings: Settings, port: int) -> list[str]:
    common = ["--host", "127.0.0.1", "--port", str(port), *settings.engine_arguments()]
    modules = {
        "ours": "server",
        "openai": "vllm.entrypoints.openai.api_server",
        "vllm-grpc": "vllm.entrypoints.grpc_server",
    }
    return [sys.executable, "-m", modules[kind], *common]


def wait_until(server: ServerProcess, ready: Callable[[], bool], timeout: float = STARTUP_TIMEOUT_SECONDS) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise BenchmarkError(
                f"server exited with {server.process.returncode} during startup:\n{short_tail(server.log_path)}"
            )
        if ready():
            return
        time.sleep(0.5)
    raise BenchmarkError(f"server not ready after {timeout:.0f}s:\n{short_tail(server.log_path)}")


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2.0) as response:
            return response.status == 200
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


def http_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10.0) as response:
        return json.load(response)


def vllm_grpc_healthy(target: str) -> bool:
    from vllm.grpc import vllm_engine_pb2, vllm_engine_pb2_grpc

    with grpc.insecure_channel(target) as channel:
        try:
            reply = vllm_engine_pb2_grpc.VllmEngineStub(channel).HealthCheck(
                vllm_engine_pb2.HealthCheckRequest(), timeout=2.0
            )
        except grpc.RpcError:
            return False
    return reply.healthy


def wait_ready(kind: str, server: ServerProcess) -> None:
    if kind == "ours":
        wait_until_serving(server, timeout=STARTUP_TIMEOUT_SECONDS)
    elif kind == "openai":
        wait_until(server, lambda: http_ok(f"http://{server.target}/health"))
    else:
        wait_until(server, lambda: vllm_grpc_healthy(server.target))


def served_context_length(kind: str, server: ServerProcess) -> int:
    """The max model length the server reports: proof that it took the engine flags."""
    if kind == "ours":
        from gonka.mlnode.v1 import inference_pb2_grpc as pb_grpc

        with grpc.insecure_channel(server.target) as channel:
            return (
                pb_grpc.InferenceServiceStub(channel)
                .GetModelInfo(pb.GetModelInfoRequest(), timeout=10)
                .max_context_length
            )
    if kind == "openai":
        models = http_json(f"http://{server.target}/v1/models")["data"]
        return next(model["max_model_len"] for model in models if model["id"] == SERVED_MODEL_NAME)
    from vllm.grpc import vllm_engine_pb2, vllm_engine_pb2_grpc

    with grpc.insecure_channel(server.target) as channel:
        stub = vllm_engine_pb2_grpc.VllmEngineStub(channel)
        return stub.GetModelInfo(vllm_engine_pb2.GetModelInfoRequest(), timeout=10).max_context_length
