"""What the extension looks like from inside one engine process: for tests and status calls."""

from __future__ import annotations

import os
from typing import Any


def describe_this_process() -> dict[str, Any]:
    import vllm

    from engine_ext.seams import installed_seams

    return {"pid": os.getpid(), "vllm_version": vllm.__version__, "seams": installed_seams()}


def describe_model_runner(runner: Any) -> dict[str, Any]:
    """A worker's model runner: its class, and whether it is vLLM's V1 runner (which the seams need)."""
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    kind = type(runner)
    # The V1 runners of every platform (CPU, XPU...) derive from the GPU one; the V2 runners do not.
    return {
        "model_runner": f"{kind.__module__}.{kind.__qualname__}",
        "v1_model_runner": isinstance(runner, GPUModelRunner),
    }
