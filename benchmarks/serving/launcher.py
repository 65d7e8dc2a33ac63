"""One server's life: start it, wait until it serves, check what it serves, describe it, stop it."""

from __future__ import annotations

import shlex
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks.serving.cpu_accounting import ProcessInfo, descendant_pids, describe, descendants, kill_and_reap
from benchmarks.serving.errors import BenchmarkError
from benchmarks.serving.progress import progress
from benchmarks.serving.server_kinds import server_command, server_environment, served_context_length, wait_ready
from benchmarks.serving.server_logs import logged_engine_config
from benchmarks.serving.settings import Settings
from tests.support.server_process import REPO_ROOT, ServerProcess, free_port

STOP_TIMEOUT_SECONDS = 30.0


@dataclass(frozen=True)
class LiveServer:
    kind: str
    process: ServerProcess
    command: list[str]
    engine_processes: tuple[ProcessInfo, ...]  # its descendants once it served
    engine_config: str | None  # as the engine core logged it at startup

    @property
    def api_pid(self) -> int:
        return self.process.pid

    @property
    def target(self) -> str:
        return self.process.target

    @property
    def log_path(self) -> Path:
        return self.process.log_path

    def process_ids(self) -> list[int]:
        return [self.api_pid, *descendant_pids(self.api_pid)]

    def info(self) -> dict[str, Any]:
        return {
            "command": shlex.join(self.command),
            "api_pid": self.api_pid,
            "engine_processes": [asdict(info) for info in self.engine_processes],
            "engine_config": self.engine_config,
        }


def launch(command: list[str], env: dict[str, str], port: int, log_path: Path) -> ServerProcess:
    with log_path.open("w") as log:  # the child keeps its own descriptor
        process = subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    return ServerProcess(process, port, log_path)


def stop(server: ServerProcess) -> None:
    """SIGTERM, SIGKILL after a timeout; engine processes the server left behind are killed too."""
    leftovers = descendants(server.pid)
    server.stop(timeout=STOP_TIMEOUT_SECONDS)
    kill_and_reap(leftovers)


@contextmanager
def running_server(kind: str, settings: Settings) -> Iterator[LiveServer]:
    port = free_port()
    command = server_command(kind, settings, port)
    log_path = settings.log_dir / f"{kind}.log"
    progress(f"starting {kind}: {shlex.join(command)} (log: {log_path})")
    started = time.monotonic()
    server = launch(command, server_environment(stock_vllm=kind != "ours"), port, log_path)
    try:
        try:
            wait_ready(kind, server)
        except (BenchmarkError, RuntimeError, TimeoutError) as error:
            raise BenchmarkError(f"{kind} failed to start (log {log_path}):\n{error}") from None
        context = served_context_length(kind, server)
        if context != settings.max_model_len:
            raise BenchmarkError(
                f"{kind} serves a {context}-token context, not the {settings.max_model_len} it was given"
            )
        engine = tuple(describe(p) for p in descendants(server.pid))
        children = "; ".join(f"{info.pid} {info.command[:40]}" for info in engine)
        progress(f"{kind} ready in {time.monotonic() - started:.0f}s; API process {server.pid}; children: {children}")
        if not engine:
            progress(f"WARNING: {kind} has no child process: the engine runs inside the API process")
        yield LiveServer(kind, server, command, engine, logged_engine_config(log_path))
    finally:
        stopping = time.monotonic()
        stop(server)
        progress(f"{kind} stopped in {time.monotonic() - stopping:.0f}s")
