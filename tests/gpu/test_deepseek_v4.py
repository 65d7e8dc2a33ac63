"""Consensus of DeepSeek-V4's PoC forward on this host (H200, vLLM's sm90 kernels) with an independent CPU reference:
the seeded tiny DeepSeek-V4 (variants.DEEPSEEK_V4_TINY) served here mines a round of 256 nonces, and every artifact
is within L2 0.02 of tests/support/poc_reference.py's forward with vLLM's sm90 roundings
(tests/support/deepseek_v4_sm90.py); beside it the distances to the plain bf16 forward, and to the server's own
recomputation of the same nonces in validation's batches, are printed against the chain's threshold. On the H200 the
test fails: the engine is itself a median 0.018 from its own artifacts in other batches (docs/gpu.md says why).

The model is drawn on the host (torch's CPU generator: the same bytes wherever torch is the same version, which
build_info.json's sha256 records and the comparison checks) with the tokenizer files of a model that came with the
checkout, as a GPU host has no `dashscope` to convert Qwen's tokenizer:

    python -m server.embedded_model --variant deepseek-v4-tiny \
        --tokenizer-from .build/models/deepseek-v4-flash-shape-4-layers

The reference runs on this host's CPU with its transformers, which must be 5.24 or later (the CPU pin; an older
one is refused): an image with another carries the wheel beside the set (docs/gpu.md).

Environment (optional):
  MLNODE_GPU_DEEPSEEK_V4_FLAGS  vLLM flags added to the ones below, e.g. "--gpu-memory-utilization 0.5"
  MLNODE_GPU_DEEPSEEK_V4_DUMP   a path: the round's artifacts are written there as JSON, so that
                                `python -m tests.support.deepseek_v4_consensus DUMP` redoes the comparison on CPU
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from gonka.mlnode.client import InferenceClient, decode_batch
from server.embedded_model.variants import DEEPSEEK_V4_TINY
from tests.gpu.mining import BATCH_SIZE, BLOCK_HASH, PUBLIC_KEY, SEQ_LEN, K, mine, recompute_own_artifacts
from tests.gpu.servers import OneServerAtATime, ServedModel
from tests.support.deepseek_v4_consensus import MinedArtifacts, reference_distances, summary, weights_sha256

if not torch.cuda.is_available():
    pytest.skip("vLLM builds DeepSeek-V4 on CUDA only (sparse MLA, TileLang mHC kernels)", allow_module_level=True)

TOLERANCE = 0.02
MINED_NONCES = 256
# V4's attention stores K/V only as fp8_ds_mla on sm90 (models/deepseek_v4/attention.py asserts an fp8 cache for
# that layout); the PoC forward runs eagerly, and CUDA graphs of this model are not what is under test.
SERVER_FLAGS = (
    "--kv-cache-dtype",
    "fp8",
    "--max-model-len",
    "4096",
    "--compilation-config",
    '{"cudagraph_mode":"NONE"}',
)


@pytest.fixture(scope="module")
def deepseek_v4() -> ServedModel:
    model_dir = DEEPSEEK_V4_TINY.directory
    if not (model_dir / "build_info.json").is_file():
        # Opt-in: `make gpu-check` on a host that serves another model must not fail for want of this one.
        pytest.skip(f"no deepseek-v4-tiny at {model_dir}: build it as this module's docstring says to run this check")
    extra = tuple(shlex.split(os.environ.get("MLNODE_GPU_DEEPSEEK_V4_FLAGS", "")))
    return ServedModel(model_dir.resolve(), SERVER_FLAGS + extra)


@pytest.fixture(scope="module")
def deepseek_v4_client(servers: OneServerAtATime, deepseek_v4: ServedModel) -> Iterator[InferenceClient]:
    with InferenceClient(servers.serve(deepseek_v4).target) as connected:
        yield connected


def test_a_rounds_artifacts_equal_the_sm90_cpu_reference(
    deepseek_v4_client: InferenceClient, deepseek_v4: ServedModel
) -> None:
    mined_round = mine(deepseek_v4_client, MINED_NONCES // BATCH_SIZE)
    rows = [row for batch in mined_round.batches for row in decode_batch(batch)]
    assert len(rows) == MINED_NONCES
    mined = MinedArtifacts(BLOCK_HASH, PUBLIC_KEY, SEQ_LEN, K, weights_sha256(deepseek_v4.model_dir), rows)
    dump = os.environ.get("MLNODE_GPU_DEEPSEEK_V4_DUMP")
    if dump:
        mined.write(Path(dump))
    distances = reference_distances(deepseek_v4.model_dir, mined)
    # Beside the references, this engine against itself: the same nonces in validation's batches.
    distances["the server's own recomputation"] = recompute_own_artifacts(deepseek_v4_client, mined_round).distances
    report = summary(distances)
    print(report)
    far = {nonce: d for (nonce, _), d in zip(rows, distances["sm90"], strict=True) if d > TOLERANCE}
    assert not far, f"{len(far)} of {len(rows)} artifacts farther than {TOLERANCE} from the sm90 reference:\n{report}"
