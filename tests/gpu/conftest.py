"""The GPU check's servers (`make gpu-check`): the model under test, and a model with real weights (by default the
embedded one), whose artifacts the consensus check recomputes on CPU. One server runs at a time.

Environment (all optional; unset, both are the embedded model, one server, and the check runs on CPU too):
  MLNODE_GPU_MODEL_DIR        the model under test, e.g. a shape variant: `python -m server.embedded_model
                              --variant qwen3-8b-shape` builds .build/models/qwen3-8b-shape (no weights)
  MLNODE_GPU_SERVER_FLAGS     vLLM flags for it, e.g. "--load-format dummy --max-model-len 4096
                              --gpu-memory-utilization 0.85"
  MLNODE_GPU_REFERENCE_MODEL_DIR  the consensus check's model (default: the embedded model); it needs real
                              weights, which transformers loads on CPU as a Qwen3ForCausalLM
  MLNODE_GPU_REFERENCE_FLAGS  vLLM flags for that model's server, e.g. "--enforce-eager"
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gonka.mlnode.client import InferenceClient
from tests.gpu.servers import OneServerAtATime, ServedModel


@pytest.fixture(scope="session")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OneServerAtATime]:
    pool = OneServerAtATime(tmp_path_factory.mktemp("gpu-servers"))
    yield pool
    pool.stop()


@pytest.fixture(scope="session")
def model_under_test() -> ServedModel:
    return ServedModel.from_environment("MLNODE_GPU_SERVER_FLAGS", "MLNODE_GPU_MODEL_DIR")


@pytest.fixture(scope="session")
def reference_model() -> ServedModel:
    return ServedModel.from_environment("MLNODE_GPU_REFERENCE_FLAGS", "MLNODE_GPU_REFERENCE_MODEL_DIR")


@pytest.fixture(scope="module")
def client(servers: OneServerAtATime, model_under_test: ServedModel) -> Iterator[InferenceClient]:
    """A client of the model under test."""
    with InferenceClient(servers.serve(model_under_test).target) as connected:
        yield connected


@pytest.fixture(scope="module")
def reference_client(servers: OneServerAtATime, reference_model: ServedModel) -> Iterator[InferenceClient]:
    """A client of the consensus check's model (real weights)."""
    with InferenceClient(servers.serve(reference_model).target) as connected:
        yield connected
