"""The offline engine's process (offline_worker): start it, wait until its engine is loaded, send it
generate requests, describe it, stop it. Asynchronous, so that the other configurations' clients stay
served while it works."""

from __future__ import annotations

import asyncio
import json
import shlex
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks.serving.cpu_accounting import ProcessInfo, descendant_pids, describe, descendants, kill_and_reap
from benchmarks.serving.errors import BenchmarkError
from benchmarks.serving.kinds import OFFLINE
from benchmarks.serving.launcher import STOP_TIMEOUT_SECONDS
from benchmarks.serving.progress import progress
from benchmarks.serving.server_kinds import STARTUP_TIMEOUT_SECONDS, server_environment
from benchmarks.serving.server_logs import logged_engine_config, short_tail
from benchmarks.serving.settings import Settings
from benchmarks.serving.streams import STREAM_TIMEOUT_SECONDS
from tests.support.server_process import REPO_ROOT

WORKER_MODULE = "benchmarks.serving.offline_worker"


@dataclass(frozen=True)
class LiveOffline:
    process: asyncio.subprocess.Process
    command: list[str]
    log_path: Path
    engine_processes: tuple[ProcessInfo, ...]  # its descendants once the engine was loaded
    engine_config: str | None  # as the engine core logged it at startup
    kind: str = OFFLINE

    @property
    def pid(self) -> int:
        return self.process.pid

    def process_ids(self) -> list[int]:
        return [self.pid, *descendant_pids(self.pid)]

    def info(self) -> dict[str, Any]:
        return {
            "command": shlex.join(self.command),
            "api_pid": self.pid,  # the LLM's own process, in the API process's columns
            "engine_processes": [asdict(info) for info in self.engine_processes],
            "engine_config": self.engine_config,
        }

    async def generate(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(request).encode() + b"\n")
        await self.process.stdin.drain()
        return await read_reply(self.process, self.log_path, STREAM_TIMEOUT_SECONDS)


async def read_reply(process: asyncio.subprocess.Process, log_path: Path, timeout: float) -> dict[str, Any]:
    """The next reply line; an error with the log's end when the process exits or stays silent first
    (its engine core may hold the pipe open after it died, so end-of-file alone would not tell)."""
    assert process.stdout is not None
    line = asyncio.ensure_future(process.stdout.readline())
    exited = asyncio.ensure_future(process.wait())
    done, pending = await asyncio.wait((line, exited), timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    for task in pending:
        task.cancel()
    if line in done and line.result():
        return json.loads(line.result())
    why = f"exited with {process.returncode}" if exited in done else f"gave no reply in {timeout:.0f}s"
    raise BenchmarkError(f"{OFFLINE}: its process {why}:\n{short_tail(log_path)}")


async def stop(process: asyncio.subprocess.Process) -> None:
    """End of input first (the worker returns, vLLM shuts its engine down); SIGTERM, then SIGKILL,
    after timeouts; engine processes left behind are killed too."""
    leftovers = descendants(process.pid)
    if process.returncode is None:
        assert process.stdin is not None
        process.stdin.close()
        try:
            await asyncio.wait_for(process.wait(), STOP_TIMEOUT_SECONDS)
        except asyncio.TimeoutError:
            process.terminate()
            try:
                await asyncio.wait_for(process.wait(), STOP_TIMEOUT_SECONDS)
            except asyncio.TimeoutError:
                process.kill()
                await process.wait()
    kill_and_reap(leftovers)


@asynccontextmanager
async def running_offline(settings: Settings) -> AsyncIterator[LiveOffline]:
    command = [sys.executable, "-m", WORKER_MODULE, *settings.engine_arguments()]
    log_path = settings.log_dir / f"{OFFLINE}.log"
    progress(f"starting {OFFLINE}: {shlex.join(command)} (log: {log_path})")
    started = time.monotonic()
    with log_path.open("w") as log:  # the child keeps its own descriptor
        process = await asyncio.create_subprocess_exec(
            *command,
            cwd=REPO_ROOT,
            env=server_environment(stock_vllm=True),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=log,
        )
    try:
        try:
            ready = await read_reply(process, log_path, STARTUP_TIMEOUT_SECONDS)
        except BenchmarkError as error:
            raise BenchmarkError(f"{OFFLINE} failed to start (log {log_path}):\n{error}") from None
        if ready["max_model_len"] != settings.max_model_len:
            raise BenchmarkError(
                f"{OFFLINE} has a {ready['max_model_len']}-token context, not the {settings.max_model_len} it was given"
            )
        engine = tuple(describe(p) for p in descendants(process.pid))
        children = "; ".join(f"{info.pid} {info.command[:40]}" for info in engine)
        progress(
            f"{OFFLINE} ready in {time.monotonic() - started:.0f}s; LLM process {process.pid}; children: {children}"
        )
        yield LiveOffline(process, command, log_path, engine, logged_engine_config(log_path))
    finally:
        stopping = time.monotonic()
        await stop(process)
        progress(f"{OFFLINE} stopped in {time.monotonic() - stopping:.0f}s")
