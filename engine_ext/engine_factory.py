"""Builds the engine from vLLM's own engine arguments (as vLLM's CLI parses them)."""

from __future__ import annotations

import vllm
from vllm.engine.arg_utils import AsyncEngineArgs
from vllm.usage.usage_lib import UsageContext
from vllm.v1.engine.async_llm import AsyncLLM

from engine_ext.engine import MlnodeEngine
from engine_ext.vllm_version import require_supported_vllm
from engine_ext.worker_extension import WORKER_EXTENSION_CLASS


class EngineConfigurationError(ValueError):
    pass


def with_worker_extension(engine_args: AsyncEngineArgs) -> AsyncEngineArgs:
    """The server's worker methods must be mixed in; a user-supplied extension would replace them."""
    current = engine_args.worker_extension_cls
    if current and current != WORKER_EXTENSION_CLASS:
        raise EngineConfigurationError(
            f"--worker-extension-cls {current!r} is not supported: the server installs its own "
            f"({WORKER_EXTENSION_CLASS})."
        )
    engine_args.worker_extension_cls = WORKER_EXTENSION_CLASS
    return engine_args


def create_engine(engine_args: AsyncEngineArgs) -> MlnodeEngine:
    """Starts the engine processes (call before creating the gRPC server: vLLM forks)."""
    require_supported_vllm(vllm.__version__)
    llm = AsyncLLM.from_engine_args(
        with_worker_extension(engine_args), usage_context=UsageContext.OPENAI_API_SERVER
    )
    return MlnodeEngine(llm)
