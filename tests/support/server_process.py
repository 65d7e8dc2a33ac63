"""Starts `python -m server` as a real child process and waits until its health check says SERVING."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import tempfile
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

REPO_ROOT = Path(__file__).resolve().parents[2]
STARTUP_TIMEOUT_SECONDS = 300.0
# A fresh GPU host compiles a large model's PoC forward and vLLM's graphs at start (minutes): it can allow more.
STARTUP_TIMEOUT_VARIABLE = "MLNODE_STARTUP_TIMEOUT"
# How often a starting server is asked whether it serves.
POLL_INTERVAL_MS = 500
# The test suite's shared server: vLLM engine flags, passed through as a user would pass them.
# - Random weights make greedy decoding pick the JSON grammar's unbounded whitespace forever;
#   compact JSON keeps the JSON tests finite.
# - A fixed per-step token budget and prefix caching, which the chunked-prefill test relies on.
MAX_TOKENS_PER_STEP = 2048
# For servers whose tests are about the server around the engine (TLS and tokens, limits, liveness, metrics, shutdown,
# the callback store): vLLM without its compiled graph, the PoC forward uncompiled. A start took 18 s instead of 44 on
# 0.15.1, 43 s instead of 64 on 0.20.1 (this CPU, when those were the releases); the shared server, the cross-version
# servers and every test of what the engine computes keep the production configuration.
SERVER_LAYER_FLAGS = ["--enforce-eager", "--poc-forward", "eager"]
SHARED_SERVER_FLAGS = [
    "--structured-outputs-config",
    '{"backend": "xgrammar", "disable_any_whitespace": true}',
    "--max-num-batched-tokens",
    str(MAX_TOKENS_PER_STEP),
    "--enable-prefix-caching",
]


# Ports handed to servers come from below the kernel's ephemeral range. A server listens on its port only once
# its engine is up, and vLLM takes ephemeral ports for its own sockets meanwhile: an ephemeral port handed out
# here was once taken that way first ("Address already in use" at the end of a start).
PORTS_BELOW_EPHEMERAL = range(20_000, 32_768)


def free_port() -> int:
    for port in random.sample(PORTS_BELOW_EPHEMERAL, 50):
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {PORTS_BELOW_EPHEMERAL} after 50 tries")


def engine_environment(kv_cache_gib: int = 1) -> dict[str, str]:
    env = dict(os.environ)
    env["VLLM_CPU_KVCACHE_SPACE"] = str(kv_cache_gib)
    # A token in the developer's shell would lock the suite's servers; tests that want one set it.
    env.pop("MLNODE_AUTH_TOKEN", None)
    env.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    # Test servers keep their callback stores (server.poc) out of the developer's own state folder, and out of
    # another test run's (make test-all runs two releases' suites at once).
    env["XDG_STATE_HOME"] = str(state_home_of_test_servers())
    # Every engine process that runs inductor on a CPU (vLLM 0.20's sampler warm-up, compiled graphs) first probes
    # which vector instruction sets the compiler can build, each probe a fresh Python importing torch: 18 s of a
    # 0.20.1 server's start on this 2-core machine. Set, inductor takes the base sets the CPU reports (what the
    # probe finds where the compiler supports them) and probes only the extensions: 10 s.
    env.setdefault("TORCHINDUCTOR_VEC_ISA_OK", "1")
    return env


def state_home_of_test_servers() -> Path:
    """The state folder of this process's test servers (XDG_STATE_HOME): shared by the servers one test run starts
    one after another (a store left by one is delivered by the next on the same port), apart from any other run's."""
    return Path(tempfile.gettempdir()) / f"gonka-mlnode-test-state-{os.getpid()}"


@dataclass
class ServerProcess:
    process: subprocess.Popen
    port: int
    log_path: Path

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.process.pid

    def log_tail(self, lines: int = 60) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def signal(self, signum: int = signal.SIGTERM) -> None:
        self.process.send_signal(signum)

    def wait(self, timeout: float) -> int:
        return self.process.wait(timeout)

    def kill_alone(self, timeout: float = 30.0) -> None:
        """SIGKILL to the server process only, as the OOM killer sends it; then the same to the engine processes
        it leaves behind (vLLM's engine core runs on when its parent is killed so, holding its memory)."""
        orphans = _descendants(self.pid)
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout)
        for pid in orphans:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def stop(self, timeout: float = 60.0) -> int | None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode


def _descendants(pid: int) -> list[int]:
    children: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            children += [int(child) for child in (task / "children").read_text().split()]
    return [descendant for child in children for descendant in (child, *_descendants(child))]


def start_server(
    log_path: Path,
    extra_args: list[str] = (),
    port: int | None = None,
    env: dict[str, str] | None = None,
    credentials: grpc.ChannelCredentials | None = None,
    python: str = sys.executable,
) -> ServerProcess:
    """`credentials`: how the readiness check connects to a TLS server (None: plaintext).
    `python`: the interpreter, hence the virtualenv and the vLLM release, the server runs on."""
    port = port or free_port()
    log = open(log_path, "w")
    process = subprocess.Popen(
        [python, "-m", "server", "--port", str(port), *extra_args],
        cwd=REPO_ROOT,
        env=env or engine_environment(),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    server = ServerProcess(process, port, log_path)
    try:
        wait_until_serving(server, credentials=credentials)
    except BaseException:
        server.stop(timeout=10)
        raise
    return server


def startup_timeout() -> float:
    """Seconds a server may take to serve: STARTUP_TIMEOUT_SECONDS unless the environment says otherwise."""
    return float(os.environ.get(STARTUP_TIMEOUT_VARIABLE) or STARTUP_TIMEOUT_SECONDS)


def wait_until_serving(
    server: ServerProcess, timeout: float | None = None, credentials: grpc.ChannelCredentials | None = None
) -> None:
    """`timeout`: seconds; None, startup_timeout()."""
    allowed = startup_timeout() if timeout is None else timeout
    deadline = time.monotonic() + allowed
    # gRPC backs off between reconnects (1 s growing by 1.6x): after a 40-s start of refused connections the
    # next attempt could come 10-20 s after the server listens. Capped at the poll interval.
    options = [(f"grpc.{name}_reconnect_backoff_ms", POLL_INTERVAL_MS) for name in ("initial", "min", "max")]
    channel = (
        grpc.insecure_channel(server.target, options)
        if credentials is None
        else grpc.secure_channel(server.target, credentials, options)
    )
    with channel:
        health = health_pb2_grpc.HealthStub(channel)
        while time.monotonic() < deadline:
            if server.process.poll() is not None:
                raise RuntimeError(
                    f"server exited with {server.process.returncode} during startup:\n{server.log_tail()}"
                )
            try:
                status = health.Check(health_pb2.HealthCheckRequest(service=""), timeout=1.0).status
                if status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
            time.sleep(POLL_INTERVAL_MS / 1000)
    raise TimeoutError(f"server not serving after {allowed:.0f}s:\n{server.log_tail()}")
