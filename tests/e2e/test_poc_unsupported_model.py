"""A model the PoC forward has no decoder for (engine_ext.poc.decoders) is refused at start-up with a message naming
its architecture, never served with a forward that would skip its reflections; with --poc-forward off the operator
serves it for inference only, and every PoC call is refused with POC_DISABLED.

The model: the embedded model's shape as a Llama (LlamaForCausalLM, which vLLM serves on CPU and no PoC decoder
covers), with dummy weights."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import MappingProxyType

import grpc
import pytest

from gonka.mlnode.client import InferenceClient, ServerError
from gonka.mlnode.v1 import poc_pb2, poc_pb2_grpc, validation_pb2_grpc
from gonka.mlnode.v1 import validation_pb2 as vpb
from server.embedded_model import build_embedded_model
from server.embedded_model.variants import ShapeVariant
from tests.support.server_process import REPO_ROOT, ServerProcess, engine_environment, free_port, start_server

LLAMA_SHAPE = ShapeVariant(
    "llama-tiny-shape",
    Path("unused"),
    MappingProxyType({"architectures": ("LlamaForCausalLM",), "model_type": "llama"}),
)
# Quick starts: nothing of the engine's compiled graph is under test here.
FLAGS = ["--load-format", "dummy", "--enforce-eager", "--max-model-len", "512"]


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_embedded_model(tmp_path_factory.mktemp("llama") / "model", LLAMA_SHAPE)


def test_an_architecture_without_a_decoder_is_refused_at_start_naming_it(llama_dir: Path) -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "server", "--port", str(free_port()), "--model", str(llama_dir), *FLAGS],
        cwd=REPO_ROOT,
        env=engine_environment(),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert completed.returncode == 2, completed.stderr[-3000:]
    assert "error: the PoC forward has no decoder for LlamaForCausalLM" in completed.stderr
    assert "--poc-forward off" in completed.stderr and "Traceback" not in completed.stderr.split("error: ")[-1]


@pytest.fixture(scope="module")
def poc_off(llama_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = start_server(
        tmp_path_factory.mktemp("poc-off") / "server.log", ["--model", str(llama_dir), *FLAGS, "--poc-forward", "off"]
    )
    try:
        yield process
    finally:
        exit_code = process.stop()
    assert exit_code == 0, process.log_tail()


def test_with_poc_off_it_serves_inference_and_refuses_every_poc_call(poc_off: ServerProcess) -> None:
    with InferenceClient(poc_off.target) as client:
        assert len(client.generate(token_ids=[9707, 1879, 11], max_tokens=3, temperature=0.0).first.token_ids) == 3
        model = client.model_info().served_model_name
        with pytest.raises(ServerError) as refused:
            client.poc.start_round(
                block_hash="b", public_key="k", model=model, seq_len=16, k_dim=12, batch_size=2, timeout=60
            )
        assert (refused.value.code, refused.value.reason) == (grpc.StatusCode.FAILED_PRECONDITION, "POC_DISABLED")
    with grpc.insecure_channel(poc_off.target) as channel:
        poc = poc_pb2_grpc.PocServiceStub(channel)
        params = poc_pb2.PocParams(model=model, seq_len=16)
        calls = [
            lambda: list(
                poc.ComputeArtifacts(
                    poc_pb2.ComputeArtifactsRequest(block_hash="b", public_key="k", params=params, nonces=[1]),
                    timeout=60,
                )
            ),
            lambda: poc.GetRoundStatus(poc_pb2.GetRoundStatusRequest(), timeout=60),
            lambda: list(
                validation_pb2_grpc.ValidationServiceStub(channel).ValidatePocArtifacts(
                    vpb.ValidatePocArtifactsRequest(
                        block_hash="b",
                        public_key="k",
                        params=params,
                        artifacts=[vpb.ClaimedArtifact(nonce=1, vector_b64="AAAA")],
                        stat_test=vpb.PocStatTest(dist_threshold=0.2, p_mismatch=0.1, p_value_threshold=0.05),
                    ),
                    timeout=60,
                )
            ),
        ]
        for call in calls:
            with pytest.raises(grpc.RpcError) as caught:
                call()
            assert (
                caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
                and "--poc-forward off" in caught.value.details()
            )
    assert "PoC is off (--poc-forward off)" in poc_off.log_path.read_text(errors="replace")
