"""The offline configuration's process: vLLM's `LLM`, generating on request (run by offline_process).

`python -m benchmarks.serving.offline_worker <engine flags>`: the flags are the servers' own, read by
vLLM's engine-argument parser as its servers read them. Requests arrive on stdin, one JSON object a
line; each is answered by one JSON object a line on the stdout this process was started with. vLLM
logs to stdout, so that is moved onto stderr (the log file) before vLLM is imported.

Each request is one `LLM.generate` call with `prompts` copies of the token-id prompt, the streamed
rounds' sampling (temperature, a seed per prompt from `seed_base`, ignore_eos, exactly `tokens`
tokens, top-k logprobs). Timed and CPU-accounted here, around the call alone.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import IO, Any

from benchmarks.serving.cpu_accounting import CpuWindow
from benchmarks.serving.workload import TEMPERATURE, TOP_LOGPROBS


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


def generate(llm: Any, request: dict[str, Any]) -> dict[str, Any]:
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
        replies.write(json.dumps(generate(llm, json.loads(line))) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
