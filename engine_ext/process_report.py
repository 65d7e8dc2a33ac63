"""What the extension looks like from inside one engine process: for tests and status calls."""

from __future__ import annotations

import os
from typing import Any

# What decides where a process runs and how its ranks talk, as the process itself sees it: its instance's device
# slice (engine_ext.device_slices) and the host's NVLink-multicast settings, which every engine must get
# (mlnode-http-api.md section 7). /proc/<pid>/environ cannot tell: vLLM's process titles overwrite it.
REPORTED_VARIABLES = (
    "CUDA_VISIBLE_DEVICES",
    "VLLM_CPU_OMP_THREADS_BIND",
    "NCCL_NVLS_ENABLE",
    "NCCL_CUMEM_ENABLE",
    "VLLM_ALLREDUCE_USE_SYMM_MEM",
)


def describe_this_process() -> dict[str, Any]:
    import vllm

    from engine_ext.seams import installed_seams

    environment = {name: os.environ[name] for name in REPORTED_VARIABLES if name in os.environ}
    return {
        "pid": os.getpid(),
        "vllm_version": vllm.__version__,
        "seams": installed_seams(),
        "environment": environment,
    }


def describe_model_runner(runner: Any) -> dict[str, Any]:
    """A worker's model runner: its class, and whether it is vLLM's V1 runner (which the seams need)."""
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    kind = type(runner)
    # The V1 runners of every platform (CPU, XPU...) derive from the GPU one; the V2 runners do not.
    return {
        "model_runner": f"{kind.__module__}.{kind.__qualname__}",
        "v1_model_runner": isinstance(runner, GPUModelRunner),
    }
