"""The offline configuration's rounds: per round one `LLM.generate` call with as many prompts as the
streamed rounds have streams, and the same prompt, sampling and seeds.

tokens/s: generated tokens over the call's wall time. TTFT: none (the call returns every token at
its end). API CPU: the LLM's own process (the scheduling loop's client side, output processing);
engine side: all its descendants (engine core, workers). Both counted by that process around the
call alone; the bystanders' and this process's CPU are counted here around the whole request.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from benchmarks.serving.configuration import Configuration
from benchmarks.serving.cpu_accounting import CpuWindow
from benchmarks.serving.errors import BenchmarkError
from benchmarks.serving.kinds import OFFLINE
from benchmarks.serving.measurement import round_result
from benchmarks.serving.offline_process import LiveOffline
from benchmarks.serving.round_result import RoundResult
from benchmarks.serving.workload import MEASURED_SEED_BASE, WARMUP_SEED_BASE, WARMUP_TOKENS, Workload


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
