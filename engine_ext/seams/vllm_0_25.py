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
    installed_shared_seams,
    record_token_stream_step,
    shared_seams,
)

# What vLLM raises for a request it refuses (bad sampling options, a prompt too long...): 0.25's own validation
# error (VLLMValidationError) derives from ValueError, as every refusal does.
REQUEST_REFUSALS: tuple[type[Exception], ...] = (ValueError,)


# Both supported releases install exactly the shared seams; a release that needs its own would define these here.
install_seams = install_shared_seams
expected_seams = shared_seams
installed_seams = installed_shared_seams


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
