"""The server process: refuses a bound port at once, and shuts down cleanly on SIGTERM."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from gonka.mlnode.client import InferenceClient, ServerError
from gonka.mlnode.v1 import inference_pb2 as pb
from tests.support.server_process import REPO_ROOT, SERVER_LAYER_FLAGS, engine_environment, start_server

PROMPT_IDS = [9707, 1879, 11, 419, 374, 264, 1273]
# Stands in for vLLM where a refusal must come before vLLM is imported (about 10 s of a start): importing it fails.
UNIMPORTABLE_VLLM = 'raise ImportError("vLLM was imported before the refusal")\n'


@pytest.fixture
def without_vllm(tmp_path: Path) -> dict[str, str]:
    """The server's environment with a `vllm` package first on its path that cannot be imported."""
    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm" / "__init__.py").write_text(UNIMPORTABLE_VLLM)
    env = engine_environment()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tmp_path), env.get("PYTHONPATH")]))
    return env


def run_server(*flags: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "server", *flags],
        cwd=REPO_ROOT,
        env=env or engine_environment(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_the_server_refuses_a_port_already_bound(without_vllm: dict[str, str]) -> None:
    with socket.socket() as occupant:
        occupant.bind(("127.0.0.1", 0))
        occupant.listen()
        port = occupant.getsockname()[1]
        completed = run_server("--port", str(port), env=without_vllm)
    assert completed.returncode == 2, completed.stderr[-2000:]
    assert f"127.0.0.1:{port} is already in use" in completed.stderr


def test_a_bad_server_flag_is_refused_before_vllm_is_imported(without_vllm: dict[str, str]) -> None:
    completed = run_server("--port", "0", "--engine-call-timeout", "0", env=without_vllm)
    assert completed.returncode == 2, completed.stderr[-2000:]
    assert "argument --engine-call-timeout: must be positive, got '0'" in completed.stderr


def test_a_port_named_in_a_config_file_is_checked_too(tmp_path) -> None:
    with socket.socket() as occupant:
        occupant.bind(("127.0.0.1", 0))
        occupant.listen()
        port = occupant.getsockname()[1]
        config = tmp_path / "server.yaml"
        config.write_text(f"port: {port}\n")
        # vLLM's parser reads --config; the first look, before vLLM is imported, cannot.
        completed = run_server("--config", str(config))
    assert completed.returncode == 2, completed.stderr[-2000:]
    assert f"127.0.0.1:{port} is already in use" in completed.stderr


def test_sigterm_drains_then_exits_zero(tmp_path) -> None:
    server = start_server(tmp_path / "server.log", ["--shutdown-grace", "3", *SERVER_LAYER_FLAGS])
    try:
        with InferenceClient(server.target) as client:
            # One stream on each output path: the lean token stream (no text) and vLLM's generate()
            # (text): the engine's pause must abort both.
            received: dict[bool, list] = {False: [], True: []}
            streams_done = threading.Barrier(3)

            def long_stream(include_text: bool) -> None:
                try:
                    request = dict(
                        token_ids=PROMPT_IDS, max_tokens=8000 - len(PROMPT_IDS), ignore_eos=True, temperature=0.0
                    )
                    for response in client.stream(**request, include_text=include_text):
                        received[include_text].append(response)
                finally:
                    streams_done.wait(60)

            readers = [threading.Thread(target=long_stream, args=(include_text,)) for include_text in (False, True)]
            for reader in readers:
                reader.start()
            while not (received[False] and received[True]):
                time.sleep(0.05)
            signalled = time.monotonic()
            server.signal(signal.SIGTERM)

            with grpc.insecure_channel(server.target) as channel:
                health = health_pb2_grpc.HealthStub(channel)
                deadline = time.monotonic() + 2
                status = None
                while time.monotonic() < deadline:
                    status = health.Check(health_pb2.HealthCheckRequest(service="")).status
                    if status == health_pb2.HealthCheckResponse.NOT_SERVING:
                        break
                    time.sleep(0.05)
                assert status == health_pb2.HealthCheckResponse.NOT_SERVING

            with pytest.raises(ServerError) as refused:
                client.generate(token_ids=PROMPT_IDS, max_tokens=2)
            assert refused.value.code == grpc.StatusCode.UNAVAILABLE
            assert refused.value.reason == "SHUTTING_DOWN" and refused.value.retry_after_seconds == 1.0

            streams_done.wait(30)
            for reader in readers:
                reader.join()
            # The in-flight streams outlived the signal by the grace, then ended with a clean abort.
            for include_text, responses in received.items():
                assert responses[-1].finish.reason == pb.FINISH_REASON_ABORT, include_text
            assert any(response.text for response in received[True]) and not any(
                response.text for response in received[False]
            )
            assert time.monotonic() - signalled >= 3
        assert server.wait(timeout=60) == 0
    finally:
        server.stop(timeout=10)


def test_a_dead_engine_takes_the_server_down_with_exit_code_1(tmp_path) -> None:
    server = start_server(tmp_path / "server.log", SERVER_LAYER_FLAGS)
    try:
        with InferenceClient(server.target) as client:
            status = client.server_status(include_engine_processes=True)
            engine_core = next(p.pid for p in status.engine_processes if p.role == pb.EngineProcess.ROLE_ENGINE_CORE)
            assert engine_core != server.pid
            os.kill(engine_core, signal.SIGKILL)
            assert server.wait(timeout=60) == 1, server.log_tail()
        assert "the engine died" in server.log_path.read_text()
    finally:
        server.stop(timeout=10)


def test_the_server_refuses_to_serve_without_its_vllm_plugin() -> None:
    # Refused before any engine process starts: vLLM reads the same allow-list in every process it starts.
    env = engine_environment()
    env["VLLM_PLUGINS"] = "lora_filesystem_resolver"  # an allow-list without gonka_mlnode
    completed = run_server("--port", "0", env=env)
    assert completed.returncode == 2, completed.stderr[-2000:]
    assert "VLLM_PLUGINS='lora_filesystem_resolver' leaves out the gonka_mlnode vLLM plugin" in completed.stderr
    assert "EngineCore" not in completed.stderr and "Traceback" not in completed.stderr


def test_help_documents_the_server_flags_beside_vllms_engine_flags(without_vllm: dict[str, str]) -> None:
    def help_text(*flags: str, env: dict[str, str] | None = None) -> str:
        completed = run_server(*flags, env=env)
        assert completed.returncode == 0, completed.stderr[-2000:]
        return completed.stdout

    overview = help_text("--help")
    for flag in (
        "--host",
        "--port",
        "--shutdown-grace",
        "--model",
        "--tensor-parallel-size",
        "--max-model-len",
        "--dtype",
    ):
        assert flag in overview, flag
    assert "embedded tiny Qwen3" in overview
    server_group = help_text("--help=server", env=without_vllm)  # answered before vLLM is imported
    assert "--shutdown-grace SECONDS" in server_group and "default: 50051" in server_group
    assert "--engine-stuck-after SECONDS" in server_group and "--tensor-parallel-size" not in server_group
    assert "--tensor-parallel-size" in help_text("--help=ParallelConfig")


def test_a_foreign_worker_extension_is_refused_with_a_clear_message() -> None:
    completed = run_server("--port", "0", "--worker-extension-cls", "some.other.Extension")
    assert completed.returncode == 2
    assert "--worker-extension-cls 'some.other.Extension' is not supported" in completed.stderr
    assert "Traceback" not in completed.stderr


def test_vllms_v2_model_runner_is_refused_with_a_clear_message() -> None:
    # The seams need the V1 runner; vLLM 0.25 and later build V2 when asked (and by default for some models on CUDA,
    # which the start-up check of the built runner catches: tests/gpu).
    env = engine_environment()
    env["VLLM_USE_V2_MODEL_RUNNER"] = "1"
    completed = run_server("--port", "0", env=env)
    assert completed.returncode == 2, completed.stderr[-2000:]
    assert "VLLM_USE_V2_MODEL_RUNNER=1 is not supported" in completed.stderr
    assert "Traceback" not in completed.stderr


def test_a_kv_connector_is_refused_with_a_clear_message() -> None:
    # The server's packed logprobs ride in kv_transfer_params, which a KV connector uses for its own.
    completed = run_server(
        "--port", "0", "--kv-transfer-config", '{"kv_connector": "ExampleConnector", "kv_role": "kv_both"}'
    )
    assert completed.returncode == 2
    assert "--kv-transfer-config is not supported" in completed.stderr
    assert "kv_transfer_params" in completed.stderr
    assert "Traceback" not in completed.stderr
