"""Run-time wraps of vLLM internals, one module per supported vLLM minor (0.25 and 0.28).

Each seam is a small named function with a comment on why no public hook serves; each is
idempotent (vLLM may load plugins more than once per process) and marks what it wrapped, so the
seams installed in a process can be read back from the patched objects themselves. The functions
below hand each call to the module of the installed vLLM's minor (engine_ext.seams.vllm_version guards
which releases those are). What is the same in both minors lives beside them: common.py, and the compiled
PoC forward's stand-ins, swapped in per forward rather than installed: direct_attention.py (attention
without the KV cache), fused_qk_norm_rope.py, fused_moe_swiglu.py (vLLM's unquantized Triton experts only), with
shadowing.py for the swap.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from engine_ext.seams.common import platform_kernels, return_blocks_first_in_line, token_stream_request_stats

SEAM_MODULES = {"0.25": "engine_ext.seams.vllm_0_25", "0.28": "engine_ext.seams.vllm_0_28"}


def seams_for_installed_vllm() -> ModuleType:
    """The seam module of the installed vLLM's minor (callers on a hot path keep it)."""
    import vllm

    from engine_ext.seams.vllm_version import minor_of

    minor = minor_of(vllm.__version__)
    if minor not in SEAM_MODULES:
        from engine_ext.seams.vllm_version import UnsupportedVllmVersion

        raise UnsupportedVllmVersion(f"no engine seams for vLLM {vllm.__version__}")
    return importlib.import_module(SEAM_MODULES[minor])


def install_seams(is_cpu_platform: bool) -> None:
    seams_for_installed_vllm().install_seams(is_cpu_platform)


def expected_seams(is_cpu_platform: bool) -> set[str]:
    return seams_for_installed_vllm().expected_seams(is_cpu_platform)


def installed_seams() -> list[str]:
    return seams_for_installed_vllm().installed_seams()


__all__ = [
    "expected_seams",
    "install_seams",
    "installed_seams",
    "platform_kernels",
    "return_blocks_first_in_line",
    "seams_for_installed_vllm",
    "token_stream_request_stats",
]
