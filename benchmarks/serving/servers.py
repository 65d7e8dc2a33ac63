"""The server processes: each kind's command, environment, readiness probe and served context; one server's life
(start it, wait until it serves, check what it serves, describe it, stop it); what its log tells; and the CPU seconds
of processes over a window (psutil's per-process times, in whole clock ticks)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import grpc
import psutil

from benchmarks.serving.settings import ENGINE_ENV, SERVED_MODEL_NAME, BenchmarkError, Settings, progress
from gonka.mlnode.v1 import inference_pb2 as pb
from tests.support.server_process import REPO_ROOT, ServerProcess, free_port, wait_until_serving

CLOCK_TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK")
REAP_TIMEOUT_SECONDS = 10.0


def process_cpu_ticks(pid: int) -> tuple[int, int]:
    """(utime, stime) in clock ticks of one process (all its threads, not its children).

    psutil reads them from /proc/<pid>/stat and divides by the tick rate; back in whole ticks, equal figures of two
    servers stay exactly equal."""
    times = psutil.Process(pid).cpu_times()
    return round(times.user * CLOCK_TICKS_PER_SECOND), round(times.system * CLOCK_TICKS_PER_SECOND)


def cpu_seconds_by_pid(pids: Sequence[int]) -> dict[int, float]:
    """Processes that have exited are left out."""
    seconds = {}
    for pid in pids:
        try:
            seconds[pid] = sum(process_cpu_ticks(pid)) / CLOCK_TICKS_PER_SECOND
        except psutil.NoSuchProcess:
            pass
    return seconds


def cpu_seconds_between(before: dict[int, float], after: dict[int, float]) -> float:
    """Over the processes alive at both ends: one that exits meanwhile must not subtract its total."""
    return sum(after[pid] - before[pid] for pid in before.keys() & after.keys())


@dataclass(frozen=True)
class ProcessInfo:
    pid: int
    command: str


def describe(process: psutil.Process) -> ProcessInfo:
    try:
        command = " ".join(process.cmdline()) or process.name()
    except psutil.Error:
        command = "?"
    return ProcessInfo(process.pid, command.strip()[:100])


def descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def descendant_pids(pid: int) -> list[int]:
    return [process.pid for process in descendants(pid)]


def kill_and_reap(processes: Sequence[psutil.Process]) -> None:
    """Kills what a stopped server left behind and waits for it: on a GPU the next configuration's
    engine needs the memory those processes hold."""
    for process in processes:
        try:
            process.kill()  # psutil checks the pid still names the same process
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(processes, timeout=REAP_TIMEOUT_SECONDS)


@dataclass(frozen=True)
class CpuSpent:
    """CPU seconds over one window."""

    api_user: float  # the serving process itself
    api_system: float
    engine: float  # every descendant of the serving process (engine core, its workers, helpers)
    bystanders: float  # every process of the other configurations
    load_generator: float  # this process

    @property
    def api(self) -> float:
        return self.api_user + self.api_system


class CpuWindow:
    """Opened just before a round and closed just after it. The serving process's descendants are
    listed when it opens: vLLM may start helpers after readiness."""

    def __init__(self, api_pid: int, bystander_pids: Sequence[int]) -> None:
        self.api_pid = api_pid
        self.engine_pids = descendant_pids(api_pid)
        self.bystander_pids = list(bystander_pids)
        self.engine_before = cpu_seconds_by_pid(self.engine_pids)
        self.bystanders_before = cpu_seconds_by_pid(self.bystander_pids)
        self.load_generator_before = time.process_time()
        self.api_before = process_cpu_ticks(api_pid)  # last in, first out: the tightest window

    def close(self) -> CpuSpent:
        api_after = process_cpu_ticks(self.api_pid)
        # Differences of whole ticks: equal figures of two servers stay exactly equal.
        return CpuSpent(
            api_user=(api_after[0] - self.api_before[0]) / CLOCK_TICKS_PER_SECOND,
            api_system=(api_after[1] - self.api_before[1]) / CLOCK_TICKS_PER_SECOND,
            engine=cpu_seconds_between(self.engine_before, cpu_seconds_by_pid(self.engine_pids)),
            bystanders=cpu_seconds_between(self.bystanders_before, cpu_seconds_by_pid(self.bystander_pids)),
            load_generator=time.process_time() - self.load_generator_before,
        )


def logged_engine_config(log_path: Path) -> str | None:
    """vLLM's one-line engine configuration from the server log, to confirm identical settings."""
    for line in log_path.read_text(errors="replace").splitlines():
        marker = line.find("with config: ")
        if "Initializing a V1 LLM engine" in line and marker >= 0:
            return line[marker:]
    return None


def short_tail(log_path: Path, lines: int = 40, width: int = 300) -> str:
    """The log's end, each line cut short (vLLM dumps whole scheduler states on one line)."""
    return "\n".join(line[:width] for line in log_path.read_text(errors="replace").splitlines()[-lines:])


PROJECT_PLUGIN = "gonka_mlnode"
STARTUP_TIMEOUT_SECONDS = 600.0


def server_environment(stock_vllm: bool) -> dict[str, str]:
    env = dict(os.environ)
    env.update(ENGINE_ENV)
    if stock_vllm:
        # The project's vLLM plugin is installed in this virtualenv; keep it out of stock vLLM.
        others = [p.name for p in entry_points(group="vllm.general_plugins") if p.name != PROJECT_PLUGIN]
        env["VLLM_PLUGINS"] = ",".join(others)
    return env


def server_command(kind: str, settings: Settings, port: int) -> list[str]:
    common = ["--host", "127.0.0.1", "--port", str(port), *settings.engine_arguments()]
    modules = {
        "ours": "server",
        "openai": "vllm.entrypoints.openai.api_server",
        "vllm-grpc": "vllm.entrypoints.grpc_server",
    }
    return [sys.executable, "-m", modules[kind], *common]


def wait_until(server: ServerProcess, ready: Callable[[], bool], timeout: float = STARTUP_TIMEOUT_SECONDS) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise BenchmarkError(
                f"server exited with {server.process.returncode} during startup:\n{short_tail(server.log_path)}"
            )
        if ready():
            return
        time.sleep(0.5)
    raise BenchmarkError(f"server not ready after {timeout:.0f}s:\n{short_tail(server.log_path)}")


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2.0) as response:
            return response.status == 200
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


def http_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10.0) as response:
        return json.load(response)


def vllm_grpc_healthy(target: str) -> bool:
    from vllm.grpc import vllm_engine_pb2, vllm_engine_pb2_grpc

    with grpc.insecure_channel(target) as channel:
        try:
            reply = vllm_engine_pb2_grpc.VllmEngineStub(channel).HealthCheck(
                vllm_engine_pb2.HealthCheckRequest(), timeout=2.0
            )
        except grpc.RpcError:
            return False
    return reply.healthy


def wait_ready(kind: str, server: ServerProcess) -> None:
    if kind == "ours":
        wait_until_serving(server, timeout=STARTUP_TIMEOUT_SECONDS)
    elif kind == "openai":
        wait_until(server, lambda: http_ok(f"http://{server.target}/health"))
    else:
        wait_until(server, lambda: vllm_grpc_healthy(server.target))


def served_context_length(kind: str, server: ServerProcess) -> int:
    """The max model length the server reports: proof that it took the engine flags."""
    if kind == "ours":
        from gonka.mlnode.v1 import inference_pb2_grpc as pb_grpc

        with grpc.insecure_channel(server.target) as channel:
            return (
                pb_grpc.InferenceServiceStub(channel)
                .GetModelInfo(pb.GetModelInfoRequest(), timeout=10)
                .max_context_length
            )
    if kind == "openai":
        models = http_json(f"http://{server.target}/v1/models")["data"]
        return next(model["max_model_len"] for model in models if model["id"] == SERVED_MODEL_NAME)
    from vllm.grpc import vllm_engine_pb2, vllm_engine_pb2_grpc

    with grpc.insecure_channel(server.target) as channel:
        stub = vllm_engine_pb2_grpc.VllmEngineStub(channel)
        return stub.GetModelInfo(vllm_engine_pb2.GetModelInfoRequest(), timeout=10).max_context_length


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
