"""The offline configuration: vLLM's `LLM.generate` in a process of its own.

The worker: `python -m benchmarks.serving.offline <engine flags>`, the flags read by vLLM's engine-argument parser
as its servers read them. Requests arrive on stdin, one JSON object a line; each is answered by one JSON object a
line on the stdout this process was started with. vLLM logs to stdout, so that is moved onto stderr (the log file)
before vLLM is imported. Each request is one `LLM.generate` call with `prompts` copies of the token-id prompt, the
streamed rounds' sampling (temperature, a seed per prompt from `seed_base`, ignore_eos, exactly `tokens` tokens,
top-k logprobs), timed and CPU-accounted there, around the call alone.

The process, from the benchmark's side: start it, wait until its engine is loaded, send it generate requests,
describe it, stop it; asynchronous, so that the other configurations' clients stay served while it works.

Its rounds: one `LLM.generate` call with as many prompts as the streamed rounds have streams, and the same prompt,
sampling and seeds. tokens/s: generated tokens over the call's wall time. TTFT: none (the call returns every token
at its end). API CPU: the LLM's own process (the scheduling loop's client side, output processing); engine side:
all its descendants (engine core, workers). Both counted by that process around the call alone; the bystanders'
and this process's CPU are counted here around the whole request."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import shlex
import sys
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any

from benchmarks.serving.drivers import STREAM_TIMEOUT_SECONDS
from benchmarks.serving.measurement import Configuration, RoundResult, round_result
from benchmarks.serving.servers import (
    STARTUP_TIMEOUT_SECONDS,
    STOP_TIMEOUT_SECONDS,
    CpuWindow,
    ProcessInfo,
    descendant_pids,
    descendants,
    describe,
    kill_and_reap,
    logged_engine_config,
    server_environment,
    short_tail,
)
from benchmarks.serving.settings import (
    MEASURED_SEED_BASE,
    OFFLINE,
    TEMPERATURE,
    TOP_LOGPROBS,
    WARMUP_SEED_BASE,
    WARMUP_TOKENS,
    BenchmarkError,
    Settings,
    Workload,
    progress,
)
from tests.support.server_process import REPO_ROOT


def reply_channel() -> IO[str]:
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    return replies


def build_llm(flags: list[str]) -> Any:
    from vllm import LLM
    from vllm.engine.arg_utils import EngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser()
    EngineArgs.add_cli_args(parser)
    engine_args = EngineArgs.from_cli_args(parser.parse_args(flags))
    # What LLM.from_engine_args does in vLLM 0.20 (0.15 has no such method).
    return LLM(**vars(engine_args))


def complete_logprobs(completion: Any, tokens: int) -> bool:
    """One row per token, each with the top-k (and the sampled token, when outside them)."""
    rows = completion.logprobs
    return rows is not None and len(rows) == tokens and all(len(row) >= TOP_LOGPROBS for row in rows)


def generate_in_engine(llm: Any, request: dict[str, Any]) -> dict[str, Any]:
    from vllm import SamplingParams

    count, tokens = request["prompts"], request["tokens"]
    prompts = [{"prompt_token_ids": list(request["prompt_ids"])} for _ in range(count)]
    sampling = [
        SamplingParams(
            temperature=TEMPERATURE,
            seed=request["seed_base"] + index,
            max_tokens=tokens,
            ignore_eos=True,
            logprobs=TOP_LOGPROBS,
        )
        for index in range(count)
    ]
    window = CpuWindow(os.getpid(), ())
    started = time.perf_counter()
    outputs = llm.generate(prompts, sampling, use_tqdm=False)
    wall = time.perf_counter() - started
    cpu = window.close()
    completions = [output.outputs[0] for output in outputs]
    return {
        "wall_seconds": wall,
        "api_user_seconds": cpu.api_user,
        "api_system_seconds": cpu.api_system,
        "engine_cpu_seconds": cpu.engine,
        "tokens": [len(completion.token_ids) for completion in completions],
        "prompt_tokens": [len(output.prompt_token_ids) for output in outputs],
        "without_logprobs": sum(not complete_logprobs(completion, tokens) for completion in completions),
    }


def main(flags: list[str]) -> None:
    replies = reply_channel()
    llm = build_llm(flags)
    replies.write(json.dumps({"max_model_len": llm.llm_engine.model_config.max_model_len}) + "\n")
    for line in sys.stdin:  # until the benchmark closes it
        replies.write(json.dumps(generate_in_engine(llm, json.loads(line))) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])


WORKER_MODULE = "benchmarks.serving.offline"


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


def check_reply(reply: dict[str, Any], prompts: int, tokens: int, workload: Workload) -> None:
    if reply["tokens"] != [tokens] * prompts:
        raise BenchmarkError(f"{OFFLINE}: generated {reply['tokens']} tokens per prompt, not {tokens} each")
    if reply["prompt_tokens"] != [len(workload.prompt_ids)] * prompts:
        raise BenchmarkError(
            f"{OFFLINE}: prompts of {reply['prompt_tokens']} tokens, not the {len(workload.prompt_ids)} rendered here"
        )
    if reply["without_logprobs"]:
        raise BenchmarkError(f"{OFFLINE}: {reply['without_logprobs']} completions came without their top logprobs")


async def generate(live: LiveOffline, workload: Workload, prompts: int, seed_base: int, tokens: int) -> dict[str, Any]:
    request = {"prompt_ids": workload.prompt_ids, "prompts": prompts, "seed_base": seed_base, "tokens": tokens}
    reply = await live.generate(request)
    check_reply(reply, prompts, tokens, workload)
    return reply


def offline_configuration(live: LiveOffline, workload: Workload) -> Configuration:
    async def warm_up(streams: int) -> None:
        await generate(live, workload, streams, WARMUP_SEED_BASE, min(WARMUP_TOKENS, workload.tokens))

    async def measure(streams: int, cycle: int, bystander_pids: Sequence[int]) -> RoundResult:
        window = CpuWindow(live.pid, bystander_pids)
        reply = await generate(live, workload, streams, MEASURED_SEED_BASE, workload.tokens)
        # The LLM process's and its engine's figures are its own, over the call alone.
        cpu = dataclasses.replace(
            window.close(),
            api_user=reply["api_user_seconds"],
            api_system=reply["api_system_seconds"],
            engine=reply["engine_cpu_seconds"],
        )
        tokens = sum(reply["tokens"])
        return round_result(
            OFFLINE, True, streams, cycle, tokens, reply["wall_seconds"], (), cpu, len(workload.prompt_ids)
        )

    return Configuration(OFFLINE, True, live, warm_up, measure)
