"""Session fixtures: one real server process (embedded model) shared by the end-to-end tests."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from gonka.mlnode.client import InferenceClient
from server.embedded_model import DEFAULT_MODEL_DIR
from tests.support.go_example import build_go_example
from tests.support.host_memory import several_servers_at_once
from tests.support.server_process import SHARED_SERVER_FLAGS, ServerProcess, start_server, state_home_of_test_servers


@pytest.fixture(scope="session", autouse=True)
def servers_state_home() -> Iterator[None]:
    """The test servers' state folder lives as long as the run."""
    yield
    shutil.rmtree(state_home_of_test_servers(), ignore_errors=True)


@pytest.fixture(scope="session")
def model_dir() -> Path:
    if not (DEFAULT_MODEL_DIR / "build_info.json").is_file():
        pytest.fail(f"the embedded model is not built at {DEFAULT_MODEL_DIR}: run `make test` (it builds it)")
    return DEFAULT_MODEL_DIR


@pytest.fixture(scope="session")
def tokenizer(model_dir: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(model_dir))


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory, model_dir: Path) -> Iterator[ServerProcess]:
    log_path = tmp_path_factory.mktemp("server") / "server.log"
    process = start_server(log_path, SHARED_SERVER_FLAGS)
    yield process
    exit_code = process.stop()
    assert exit_code == 0, f"server exited with {exit_code} on SIGTERM:\n{process.log_tail()}"


@pytest.fixture
def client(server: ServerProcess) -> Iterator[InferenceClient]:
    with InferenceClient(server.target) as blocking_client:
        yield blocking_client


@pytest.fixture(scope="session")
def go_example(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Go client's example command (clients/go/cmd/mlnode-example)."""
    return build_go_example(tmp_path_factory.mktemp("go"))


@pytest.fixture
def several_servers() -> Iterator[None]:
    """For a test that runs several servers at once: no other test run's such test overlaps it (host memory)."""
    with several_servers_at_once():
        yield
