"""The server process: engine first (vLLM forks), then the gRPC server, then serve until told to stop."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from engine_ext.consensus.logprobs_mode import LogprobsMode
from engine_ext.engine import ExtensionMissing, MlnodeEngine
from engine_ext.engine_calls import EngineCalls
from engine_ext.engine_factory import EngineConfigurationError, create_engine
from engine_ext.runtime import component_versions, freeze_startup_heap
from engine_ext.vllm_version import UnsupportedVllmVersion
from gonka.mlnode.v1 import inference_pb2 as pb
from gonka.mlnode.v1 import validation_pb2 as vpb
from server.admission import Admission
from server.engine_watch import watch_engine
from server.health import HealthService
from server.inference_servicer import InferenceServicer
from server.options import ServerOptions
from server.reflection import enable_reflection
from server.request_registry import RequestRegistry
from server.service_registration import add_raw_request_service
from server.shutdown import ShutdownTrigger
from server.tokenizer_pool import TokenizerPool
from server.translation import RequestTranslator
from server.translation.chat_template import client_template_variables
from server.translation.prompt import PromptLimits, PromptReader
from server.validation_servicer import ValidationServicer

log = logging.getLogger(__name__)

INFERENCE_SERVICE = pb.DESCRIPTOR.services_by_name["InferenceService"]
VALIDATION_SERVICE = vpb.DESCRIPTOR.services_by_name["ValidationService"]
HEALTH_CHECKED_SERVICES = ("", INFERENCE_SERVICE.full_name, VALIDATION_SERVICE.full_name)
# After the grace, aborted streams get this long to deliver their final (abort) message.
ABORT_FLUSH_SECONDS = 2.0
MAX_SEND_MESSAGE_BYTES = 64 * 1024 * 1024
# The default prompt bound: generous for any text that fits the context (English runs at about
# 4 characters per token), while keeping the tokenization of a refused prompt short.
DEFAULT_PROMPT_CHARS_PER_TOKEN = 16
LOGPROBS_MODES = {"processed": LogprobsMode.PROCESSED, "raw": LogprobsMode.RAW}


def grpc_server_options(max_request_bytes: int) -> tuple[tuple[str, Any], ...]:
    return (
        # A second server must fail to bind, not silently share the port.
        ("grpc.so_reuseport", 0),
        ("grpc.max_send_message_length", MAX_SEND_MESSAGE_BYTES),
        # Larger requests get RESOURCE_EXHAUSTED from grpc itself, before any handler runs.
        ("grpc.max_receive_message_length", max_request_bytes),
        ("grpc.keepalive_time_ms", 30_000),
        ("grpc.keepalive_timeout_ms", 10_000),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
        ("grpc.http2.max_pings_without_data", 0),
    )


class StartupError(RuntimeError):
    pass


async def serve(options: ServerOptions, engine_args: Any) -> int:
    # Installed before the engine's blocking start: a signal that arrives meanwhile is only noted
    # (a Python-level handler raising inside vLLM's startup poll would be swallowed) and acted on
    # once the engine is up, so its processes are always shut down, never orphaned.
    trigger = ShutdownTrigger()
    trigger.install_signal_handlers()
    calls = EngineCalls(options.engine_call_timeout_seconds, options.engine_stuck_seconds)
    try:
        engine = create_engine(engine_args, calls, LOGPROBS_MODES[options.default_logprobs_mode])
    except (EngineConfigurationError, UnsupportedVllmVersion) as error:
        raise StartupError(str(error)) from error
    try:
        return await _serve_engine(engine, options, trigger)
    finally:
        engine.shutdown()


async def _serve_engine(engine: MlnodeEngine, options: ServerOptions, trigger: ShutdownTrigger) -> int:
    try:
        await engine.require_extension()
    except ExtensionMissing as error:
        raise StartupError(str(error)) from error
    facts = engine.model_facts()
    tokenizer = engine.tokenizer()
    limits = PromptLimits(
        max_chars=options.max_prompt_chars or DEFAULT_PROMPT_CHARS_PER_TOKEN * facts.max_model_len,
        template_variables=client_template_variables(tokenizer),
    )
    tokenizers = TokenizerPool(tokenizer)
    registry = RequestRegistry()
    admission = Admission()
    health = HealthService()
    translator = RequestTranslator(facts, PromptReader(facts, limits, tokenizers))
    versions = pb.Versions(**component_versions(), grpc=grpc.__version__)
    servicer = InferenceServicer(engine, facts, limits, options.max_request_bytes, translator, registry, admission, versions)

    server = grpc.aio.server(options=grpc_server_options(options.max_request_bytes))
    add_raw_request_service(server, INFERENCE_SERVICE, servicer)
    add_raw_request_service(server, VALIDATION_SERVICE, ValidationServicer(engine, facts, translator, admission))
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    health_service = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name
    enable_reflection(server, (INFERENCE_SERVICE.full_name, VALIDATION_SERVICE.full_name, health_service))
    try:
        server.add_insecure_port(options.address)
    except RuntimeError as error:
        raise StartupError(f"cannot listen on {options.address}: {error}") from error
    freeze_startup_heap()
    await server.start()
    for service in HEALTH_CHECKED_SERVICES:
        await health.set(service, health_pb2.HealthCheckResponse.SERVING)
    log.info("serving %s on %s", facts.served_model_name, options.address)

    background = [asyncio.create_task(watch_engine(engine, trigger, health, HEALTH_CHECKED_SERVICES, admission))]
    if engine.logs_stats:
        background.append(asyncio.create_task(_log_engine_stats(engine)))
    await trigger.wait()
    for task in background:
        task.cancel()
    log.info("shutting down (%s)", trigger.reason)
    admission.close()
    await health.enter_graceful_shutdown()
    await _drain(engine, registry, trigger, options.shutdown_grace_seconds)
    await server.stop(grace=ABORT_FLUSH_SECONDS)
    tokenizers.close()
    log.info("stopped")
    return trigger.exit_code


async def _drain(engine: MlnodeEngine, registry: RequestRegistry, trigger: ShutdownTrigger, grace: float) -> None:
    """In-flight streams run until done or the grace ends; then the engine is paused, which aborts
    every request in flight on both output paths (their clients receive a final FINISH_REASON_ABORT
    message rather than a cut connection) and refuses those still being tokenized."""
    drained = asyncio.create_task(registry.wait_until_empty(grace))
    forced = asyncio.create_task(trigger.wait_forced())
    await asyncio.wait((drained, forced), return_when=asyncio.FIRST_COMPLETED)
    forced.cancel()
    if drained.done() and drained.result():
        return
    drained.cancel()
    if not engine.errored:
        aborted = await engine.pause()
        log.info("aborted %d in-flight request(s)", aborted)
        await registry.wait_until_empty(ABORT_FLUSH_SECONDS)


async def _log_engine_stats(engine: MlnodeEngine) -> None:
    while True:
        await asyncio.sleep(engine.log_stats_interval_seconds)
        await engine.log_stats()
