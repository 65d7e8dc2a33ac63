"""The configurations a run can compare, and which of them the installed vLLM has."""

from __future__ import annotations

from importlib.util import find_spec
from pathlib import Path
from types import MappingProxyType

OFFLINE = "offline"  # vLLM's LLM.generate in a process of its own
KINDS = ("ours", "openai", "vllm-grpc", OFFLINE)
# vllm_grpc_driver speaks vLLM 0.15's own stubs; vLLM 0.20 moved its gRPC server onto the
# smg-grpc-servicer package and dropped the module.
VLLM_GRPC_STUBS = Path("grpc") / "vllm_engine_pb2.py"
NOT_INSTALLED = MappingProxyType(
    {"vllm-grpc": "the installed vLLM has no vllm.grpc module (0.20 moved its gRPC server to smg-grpc-servicer)"}
)


def installed_kinds() -> tuple[str, ...]:
    """Found without importing vLLM (ten seconds), so that flags are checked at once."""
    spec = find_spec("vllm")
    locations = [Path(location) for location in (spec.submodule_search_locations or ())] if spec else []
    has_grpc = any((location / VLLM_GRPC_STUBS).is_file() for location in locations)
    return tuple(kind for kind in KINDS if kind != "vllm-grpc" or has_grpc)
