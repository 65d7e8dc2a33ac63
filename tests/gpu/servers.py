"""Servers for the GPU check: a model with its flags, served one at a time (two engines would share one GPU's memory)."""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest

from server.embedded_model import DEFAULT_MODEL_DIR
from tests.support.server_process import SHARED_SERVER_FLAGS, ServerProcess, start_server


@dataclass(frozen=True)
class ServedModel:
    model_dir: Path
    flags: tuple[str, ...]

    @classmethod
    def from_environment(cls, flags_variable: str, dir_variable: str) -> ServedModel:
        """The model directory and vLLM flags the two variables name; unset, the embedded model with no flags."""
        model_dir = Path(os.environ.get(dir_variable) or DEFAULT_MODEL_DIR)
        if not (model_dir / "config.json").is_file():
            pytest.fail(f"no model at {model_dir}: build it on a connected machine (`make model`) and copy it along")
        return cls(model_dir.resolve(), tuple(shlex.split(os.environ.get(flags_variable, ""))))

    def server_arguments(self) -> list[str]:
        # The suite's shared flags first (compact JSON keeps random-weight grammars finite), so the model's own win.
        return ["--model", str(self.model_dir), *SHARED_SERVER_FLAGS, *self.flags]


class OneServerAtATime:
    """Serves one ServedModel at a time: asking for another stops the running server first; asking for the
    running one again reuses it."""

    def __init__(self, log_dir: Path) -> None:
        self._log_dir = log_dir
        self._running: tuple[ServedModel, ServerProcess] | None = None
        self._started = 0

    def serve(self, model: ServedModel) -> ServerProcess:
        if self._running is not None and self._running[0] == model:
            return self._running[1]
        self.stop()
        self._started += 1
        process = start_server(self._log_dir / f"server-{self._started}.log", model.server_arguments())
        self._running = (model, process)
        return process

    def stop(self) -> None:
        if self._running is None:
            return
        _, process = self._running
        self._running = None
        exit_code = process.stop()
        assert exit_code == 0, f"server exited with {exit_code} on SIGTERM:\n{process.log_tail()}"
