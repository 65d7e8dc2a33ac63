"""Builds the engine from vLLM's own engine arguments (as vLLM's CLI parses them)."""

from __future__ import annotations

import copy
import os

import vllm
import vllm.envs as vllm_envs
from vllm.engine.arg_utils import AsyncEngineArgs
from vllm.v1.engine.async_llm import AsyncLLM

from engine_ext.consensus.logprobs_mode import DEFAULT_MODE, LogprobsMode
from engine_ext.device_slices import DeviceSlice, overlaid_environment
from engine_ext.engine import MlnodeEngine
from engine_ext.engine_args import STRUCTURED_OUTPUT_BACKEND, USAGE_CONTEXT, EngineSettings
from engine_ext.engine_calls import EngineCalls
from engine_ext.engine_metrics import claim_engine_metrics
from engine_ext.generation.packed_logprobs import PACKED_LOGPROBS_KEY
from engine_ext.poc.decoders import decoder_class_for, unsupported_message
from engine_ext.seams.vllm_version import require_supported_vllm
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


def require_no_kv_connector(engine_args: AsyncEngineArgs) -> None:
    """Token streams' logprobs ride in the engine outputs' kv_transfer_params, the field through which
    a KV connector hands on its own transfer parameters: refused, rather than two users of one field
    corrupting each other silently."""
    if engine_args.kv_transfer_config is not None:
        raise EngineConfigurationError(
            "--kv-transfer-config is not supported: the server carries its packed logprobs in the engine "
            f"outputs' kv_transfer_params (key {PACKED_LOGPROBS_KEY!r}), the field a KV connector uses for "
            "its own transfer parameters. Start the server without --kv-transfer-config."
        )


def require_xgrammar_backend(engine_args: AsyncEngineArgs) -> None:
    """A replayed token that breaks a request's grammar must switch that grammar off, which a seam does
    on xgrammar's grammar class only: another backend would keep constraining from a broken state."""
    backend = engine_args.structured_outputs_config.backend
    if backend != STRUCTURED_OUTPUT_BACKEND:
        raise EngineConfigurationError(
            f"structured-output backend {backend!r} is not supported: grammar degradation during validation "
            "replays (a replayed token that breaks a request's grammar switches that grammar off) is "
            f"implemented for {STRUCTURED_OUTPUT_BACKEND} only. Leave the backend unset or set it to "
            f"{STRUCTURED_OUTPUT_BACKEND!r} in --structured-outputs-config."
        )


def require_poc_decoder(engine_args: AsyncEngineArgs) -> None:
    """A model the PoC forward has no decoder for is refused before the engine starts (the workers' own check,
    MlnodeEngine.poc_decoder, stays the final word): the architecture vLLM resolves for it, by name."""
    architecture = engine_args.create_model_config().architecture
    if decoder_class_for(architecture) is None:
        raise EngineConfigurationError(unsupported_message(architecture))


def require_v1_model_runner_asked() -> None:
    """An explicit VLLM_USE_V2_MODEL_RUNNER=1 is refused before anything starts (as vLLM itself parses the variable);
    the runner the engine actually builds is checked once it runs (MlnodeEngine.require_extension), since vLLM 0.25
    and later choose V2 by default for some models."""
    if vllm_envs.VLLM_USE_V2_MODEL_RUNNER:
        raise EngineConfigurationError(
            "VLLM_USE_V2_MODEL_RUNNER=1 is not supported: the server's engine seams need vLLM's V1 model runner "
            "(the V2 runner has no logits processors and another sampler). Unset the variable or set it to 0."
        )


def require_processed_default_under_speculation(
    engine_args: AsyncEngineArgs, default_logprobs_mode: LogprobsMode
) -> None:
    """Under speculative decoding every request's logprobs are processed (engine.speculation_refusal):
    a raw default would refuse every request that asks for logprobs without naming a mode."""
    if engine_args.speculative_config is not None and default_logprobs_mode != LogprobsMode.PROCESSED:
        raise EngineConfigurationError(
            f"a default logprobs mode of {default_logprobs_mode.value} (--default-logprobs-mode) is not supported with "
            "--speculative-config: speculative decoding serves processed logprobs only. Leave the default mode processed."
        )


def create_engine(
    settings: EngineSettings,
    calls: EngineCalls,
    default_logprobs_mode: LogprobsMode = DEFAULT_MODE,
    request_metrics: bool = False,
    poc_compiled: bool = True,
    poc_enabled: bool = True,
    device_slice: DeviceSlice = DeviceSlice(0),
) -> MlnodeEngine:
    """Starts the engine processes (call before creating the gRPC server: vLLM forks), and returns once the
    engine is up (vLLM's start blocks: engines are started one after the other).
    `request_metrics`: token streams feed vLLM's per-request metrics too (engine_ext.seams.token_streams);
    `poc_compiled`: the compiled PoC forward, else the eager one; `poc_enabled`: False serves a model without a PoC
    decoder (PoC off); `device_slice`: the instance's devices (engine_ext.device_slices), set on top of the server's
    environment while its processes are spawned."""
    require_supported_vllm(vllm.__version__)
    require_v1_model_runner_asked()
    require_no_kv_connector(settings.vllm_args)
    require_xgrammar_backend(settings.vllm_args)
    if poc_enabled:
        require_poc_decoder(settings.vllm_args)
    require_processed_default_under_speculation(settings.vllm_args, default_logprobs_mode)
    # A copy per instance: vLLM's configuration is built from the arguments it is given.
    engine_args = with_worker_extension(copy.deepcopy(settings.vllm_args))
    # Each request's own mode is set per batch by a sampler seam; the engine-wide one only decides
    # which top-k/top-p kernel vLLM binds, and processed keeps it off FlashInfer's, which has no
    # processed logprobs.
    engine_args.logprobs_mode = LogprobsMode.PROCESSED.value
    # Read by vLLM while it configures the engine, and inherited by the engine processes it starts.
    os.environ.update(settings.environment)
    with overlaid_environment(device_slice.environment):
        llm = AsyncLLM.from_engine_args(engine_args, usage_context=USAGE_CONTEXT)
    return MlnodeEngine(llm, calls, default_logprobs_mode, request_metrics, poc_compiled, claim_engine_metrics())
