"""Tensor parallel 2 on two GPUs, the production shape in miniature (the network's model runs at tensor parallel 4):
the consensus check's model (real weights) served at tensor parallel 2 computes the same artifacts as at tensor
parallel 1 and as the CPU reference, within L2 0.02 each (a tenth of the network's 0.2).

Needs a host with two GPUs; on a one-GPU host it is skipped with that reason. On hosts whose NVLink multicast is off
(NCCL_NVLS_ENABLE=0), run with VLLM_ALLREDUCE_USE_SYMM_MEM=0 too: vLLM's symmetric-memory all-reduce is the one
path here that would ask for multicast.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gonka.mlnode.client import InferenceClient, decode_batch
from tests.gpu.mining import BLOCK_HASH, K, PUBLIC_KEY, SEQ_LEN
from tests.gpu.servers import OneServerAtATime, ServedModel
from tests.support.poc_reference import HfPocReference, l2_distance

TENSOR_PARALLEL = 2
TOLERANCE = 0.02
# A full batch of the default 32 and a ragged one of 8.
NONCES = list(range(40))


@pytest.fixture(scope="module")
def split_model(reference_model: ServedModel) -> ServedModel:
    if torch.cuda.device_count() < TENSOR_PARALLEL:
        pytest.skip(
            f"tensor parallel {TENSOR_PARALLEL} needs {TENSOR_PARALLEL} GPUs; this host has {torch.cuda.device_count()}"
        )
    return ServedModel(
        reference_model.model_dir, (*reference_model.flags, "--tensor-parallel-size", str(TENSOR_PARALLEL))
    )


def served_artifacts(servers: OneServerAtATime, model: ServedModel) -> tuple[int, dict[int, np.ndarray]]:
    """The server's tensor parallel size and the artifacts of NONCES."""
    with InferenceClient(servers.serve(model).target) as client:
        info = client.model_info()
        batches = client.poc.compute_artifacts(
            block_hash=BLOCK_HASH,
            public_key=PUBLIC_KEY,
            model=info.served_model_name,
            seq_len=SEQ_LEN,
            nonces=NONCES,
            k_dim=K,
            timeout=300,
        )
        rows = [row for batch in batches for row in decode_batch(batch)]
    assert sorted(nonce for nonce, _ in rows) == NONCES
    return info.tensor_parallel_size, dict(rows)


@pytest.fixture(scope="module")
def single_gpu(
    servers: OneServerAtATime, reference_model: ServedModel, split_model: ServedModel
) -> dict[int, np.ndarray]:
    # split_model comes first so that a one-GPU host skips before it starts any server.
    size, artifacts = served_artifacts(servers, reference_model)
    assert size == 1
    return artifacts


@pytest.fixture(scope="module")
def two_gpus(
    servers: OneServerAtATime, split_model: ServedModel, single_gpu: dict[int, np.ndarray]
) -> dict[int, np.ndarray]:
    size, artifacts = served_artifacts(servers, split_model)
    assert size == TENSOR_PARALLEL
    return artifacts


def test_tensor_parallel_2_artifacts_equal_tensor_parallel_1(
    single_gpu: dict[int, np.ndarray], two_gpus: dict[int, np.ndarray]
) -> None:
    distances = {nonce: l2_distance(two_gpus[nonce], single_gpu[nonce]) for nonce in NONCES}
    print(
        f"{len(NONCES)} artifacts, tensor parallel {TENSOR_PARALLEL} vs 1: max L2 {max(distances.values()):.4g}, "
        f"mean {np.mean(list(distances.values())):.4g}"
    )
    assert max(distances.values()) <= TOLERANCE, distances


def test_tensor_parallel_2_artifacts_equal_the_cpu_reference(
    reference_model: ServedModel, two_gpus: dict[int, np.ndarray]
) -> None:
    reference = HfPocReference(reference_model.model_dir)
    distances = {
        nonce: l2_distance(two_gpus[nonce], reference.vector(BLOCK_HASH, PUBLIC_KEY, nonce, SEQ_LEN, K))
        for nonce in NONCES
    }
    print(
        f"{len(NONCES)} artifacts, tensor parallel {TENSOR_PARALLEL} vs the CPU reference: max L2 {max(distances.values()):.4g}"
    )
    assert max(distances.values()) <= TOLERANCE, distances
