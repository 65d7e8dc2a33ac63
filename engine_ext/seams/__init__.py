"""Run-time wraps of vLLM internals, one module per supported vLLM minor.

Each seam is a small named function with a comment on why no public hook serves; each is
idempotent (vLLM may load plugins more than once per process) and marks what it wrapped, so the
seams installed in a process can be read back from the patched objects themselves.
"""

from engine_ext.seams.vllm_0_15 import (
    expected_seams,
    install_seams,
    installed_seams,
    platform_kernels,
    record_token_stream_step,
    return_blocks_first_in_line,
    token_stream_request_stats,
)

__all__ = [
    "expected_seams",
    "install_seams",
    "installed_seams",
    "platform_kernels",
    "record_token_stream_step",
    "return_blocks_first_in_line",
    "token_stream_request_stats",
]
