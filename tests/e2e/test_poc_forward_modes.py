"""The two PoC forwards (--poc-forward): the eager one and the compiled one (the default, which every other PoC
test exercises on the session's server) compute the same artifacts.

The compiled forward is torch.compile's graph of the same layer stack (engine_ext.poc.layer_stack), with the
norms, activations and reflections fused by inductor: its numbers differ from the eager kernels' by rounding
only. A validator may run either, so both must stay within the project's bound of the Hugging Face reference
(0.02 per vector) and of each other. One server of its own, started with --poc-forward eager.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest

from gonka.mlnode.v1 import inference_pb2, inference_pb2_grpc, poc_pb2_grpc
from tests.support.poc_reference import HfPocReference, artifacts_request, l2_distance, one_forward
from tests.support.server_process import ServerProcess, start_server

BLOCK_HASH = "e4a9b1c07d3f5e2a8b6c4d0e9f1a3b5c7d9e0f2a4b6c8d1e3f5a7b9c0d2e4f61"
PUBLIC_KEY = "gonka1eagerandcompiledagreezz7k3m5n8p2q4"
K = 12
TOLERANCE = 0.02
NONCES = [0, 5, 42, 999, -3, 2147483647]
SEQ_LENS = [64, 256]


@pytest.fixture(scope="module")
def eager_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = start_server(
        # vLLM's compiled graph has no part in a PoC forward (the eager one runs vLLM's own kernels): not built here.
        tmp_path_factory.mktemp("poc-eager") / "server.log",
        ["--poc-forward", "eager", "--enforce-eager"],
    )
    try:
        yield process
    finally:
        exit_code = process.stop()
    assert exit_code == 0, f"the eager-forward server exited with {exit_code} on SIGTERM:\n{process.log_tail()}"


@pytest.fixture(scope="module")
def reference(model_dir: Path) -> HfPocReference:
    return HfPocReference(model_dir)


def artifacts(server: ServerProcess, seq_len: int) -> dict[int, np.ndarray]:
    with grpc.insecure_channel(server.target) as channel:
        model = inference_pb2_grpc.InferenceServiceStub(channel).GetModelInfo(
            inference_pb2.GetModelInfoRequest(), timeout=30
        )
        request = artifacts_request(
            model.served_model_name, NONCES, seq_len, BLOCK_HASH, PUBLIC_KEY, K, False, batch_size=len(NONCES)
        )
        return dict(one_forward(poc_pb2_grpc.PocServiceStub(channel), request))


def test_only_the_compiled_server_compiles(server: ServerProcess, eager_server: ServerProcess) -> None:
    # Without this, two servers that both ran one forward would make the comparisons below vacuous.
    assert "PoC forward compiled in" in server.log_path.read_text(errors="replace")
    assert "compiling the PoC forward" not in eager_server.log_path.read_text(errors="replace")


@pytest.mark.parametrize("seq_len", SEQ_LENS)
def test_eager_and_compiled_artifacts_agree_and_equal_the_reference(
    server: ServerProcess, eager_server: ServerProcess, reference: HfPocReference, seq_len: int
) -> None:
    compiled, eager = artifacts(server, seq_len), artifacts(eager_server, seq_len)
    between = {nonce: l2_distance(compiled[nonce], eager[nonce]) for nonce in NONCES}
    eager_to_reference = {
        nonce: l2_distance(eager[nonce], reference.vector(BLOCK_HASH, PUBLIC_KEY, nonce, seq_len, K, False))
        for nonce in NONCES
    }
    print(
        f"seq_len {seq_len}: L2 compiled vs eager max {max(between.values()):.6f}, "
        f"eager vs the HF reference max {max(eager_to_reference.values()):.6f}"
    )
    assert max(between.values()) <= TOLERANCE, between
    assert max(eager_to_reference.values()) <= TOLERANCE, eager_to_reference
