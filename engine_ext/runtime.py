"""Process-wide facts and settings of the engine's runtime that the server reports or applies."""

from __future__ import annotations

import importlib.metadata
import platform

import torch
import vllm
import vllm.envs as vllm_envs
from vllm.utils.gc_utils import freeze_gc_heap


def freeze_startup_heap() -> None:
    """As vLLM's OpenAI server does: the startup heap (torch, transformers, vLLM) moves out of the
    collector's reach, so that its oldest-generation passes stop walking it while streams run."""
    freeze_gc_heap()


def cache_vllm_environment() -> None:
    """As vLLM's engine core and workers do once started (its frontend never does): every vllm.envs
    read stops re-reading os.environ (about 2 µs each). The step statistics read one per request
    output (IterationStats.update_from_output), on both output paths. Call it once the engine is up:
    nothing sets vLLM's variables after that."""
    vllm_envs.enable_envs_cache()


def component_versions() -> dict[str, str]:
    return {
        "server": importlib.metadata.version("gonka-mlnode"),
        "vllm": vllm.__version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
    }
