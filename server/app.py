"""The server process: engine first (vLLM forks), then the gRPC server, then serve until told to stop."""

from __future__ import annotations

import asyncio
import errno
import importlib.metadata
import logging
import platform
import socket

import grpc
import torch
import vllm
import vllm.envs as vllm_envs
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio
from vllm.engine.arg_utils import AsyncEngineArgs
from vllm.utils.gc_utils import freeze_gc_heap

from engine_ext.engine import ExtensionMissing, MlnodeEngine
from engine_ext.engine_factory import EngineConfigurationError, create_engine
from engine_ext.vllm_version import UnsupportedVllmVersion
from gonka.mlnode.v1 import inference_pb2 as pb
from gonka.mlnode.v1 import inference_pb2_grpc as pb_grpc
from server.admission import Admission
from server.inference_servicer import InferenceServicer
from server.model_facts import read_model_facts
from server.options import ServerOptions
from server.reflection import enable_reflection
from server.request_registry import RequestRegistry
from server.shutdown import ShutdownTrigger
from server.translation import RequestTranslator

log = logging.getLogger(__name__)

INFERENCE_SERVICE = pb.DESCRIPTOR.services_by_name["InferenceService"].full_name
HEALTH_CHECKED_SERVICES = ("", INFERENCE_SERVICE)
ENGINE_WATCH_INTERVAL_SECONDS = 0.5
# After the grace, aborted streams get this long to deliver their final (abort) message.
ABORT_FLUSH_SECONDS = 2.0
GRPC_SERVER_OPTIONS = (
    # A second server must fail to bind, not silently share the port.
    ("grpc.so_reuseport", 0),
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
    ("grpc.http2.max_pings_without_data", 0),
)


class StartupError(RuntimeError):
    pass


def require_port_free(options: ServerOptions) -> None:
    """Fails in a second instead of after the engine's minute-long start."""
    family = socket.AF_INET6 if ":" in options.host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        # Like gRPC's own listener: a TIME_WAIT leftover is fine, a live listener is not.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((options.host, options.port))
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                raise StartupError(f"{options.address} is already in use by another process") from error
            raise StartupError(f"cannot listen on {options.address}: {error.strerror}") from error


async def serve(options: ServerOptions, engine_args: AsyncEngineArgs) -> int:
    require_port_free(options)
    # Installed before the engine's blocking start: a signal that arrives meanwhile is only noted
    # (a Python-level handler raising inside vLLM's startup poll would be swallowed) and acted on
    # once the engine is up, so its processes are always shut down, never orphaned.
    trigger = ShutdownTrigger()
    trigger.install_signal_handlers()
    try:
        engine = create_engine(engine_args)
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
    tokenizer = engine.llm.get_tokenizer()
    facts = read_model_facts(engine.llm.vllm_config, tokenizer)
    registry = RequestRegistry()
    admission = Admission()
    health = health_aio.HealthServicer()
    servicer = InferenceServicer(engine, facts, RequestTranslator(facts, tokenizer), registry, admission, _versions())

    server = grpc.aio.server(options=GRPC_SERVER_OPTIONS)
    pb_grpc.add_InferenceServiceServicer_to_server(servicer, server)
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    enable_reflection(server, (INFERENCE_SERVICE, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name))
    try:
        server.add_insecure_port(options.address)
    except RuntimeError as error:
        raise StartupError(f"cannot listen on {options.address}: {error}") from error
    # As vLLM's OpenAI server does: the startup heap (torch, transformers, vLLM) moves out of the
    # collector's reach, so that its oldest-generation passes stop walking it while streams run.
    freeze_gc_heap()
    await server.start()
    for service in HEALTH_CHECKED_SERVICES:
        await health.set(service, health_pb2.HealthCheckResponse.SERVING)
    log.info("serving %s on %s", facts.served_model_name, options.address)

    background = [asyncio.create_task(_watch_engine(engine, trigger))]
    if engine.llm.log_stats:
        background.append(asyncio.create_task(_log_engine_stats(engine)))
    await trigger.wait()
    for task in background:
        task.cancel()
    log.info("shutting down (%s)", trigger.reason)
    admission.close()
    await health.enter_graceful_shutdown()
    await _drain(engine, registry, trigger, options.shutdown_grace_seconds)
    await server.stop(grace=ABORT_FLUSH_SECONDS)
    log.info("stopped")
    return trigger.exit_code


async def _drain(engine: MlnodeEngine, registry: RequestRegistry, trigger: ShutdownTrigger, grace: float) -> None:
    """In-flight streams run until done or the grace ends; the rest are aborted in the engine, so
    their clients receive a final FINISH_REASON_ABORT message rather than a cut connection."""
    drained = asyncio.create_task(registry.wait_until_empty(grace))
    forced = asyncio.create_task(trigger.wait_forced())
    await asyncio.wait((drained, forced), return_when=asyncio.FIRST_COMPLETED)
    forced.cancel()
    if drained.done() and drained.result():
        return
    drained.cancel()
    remaining = registry.request_ids()
    if remaining and not engine.errored:
        log.info("aborting %d in-flight request(s)", len(remaining))
        await engine.abort(remaining)
        await registry.wait_until_empty(ABORT_FLUSH_SECONDS)


async def _watch_engine(engine: MlnodeEngine, trigger: ShutdownTrigger) -> None:
    while not engine.errored:
        await asyncio.sleep(ENGINE_WATCH_INTERVAL_SECONDS)
    log.error("the engine died; going down")
    trigger.request("engine died", exit_code=1)


async def _log_engine_stats(engine: MlnodeEngine) -> None:
    """vLLM's periodic throughput / queue / KV-cache log line, as its own servers print it."""
    while True:
        await asyncio.sleep(vllm_envs.VLLM_LOG_STATS_INTERVAL)
        await engine.llm.do_log_stats()


def _versions() -> pb.Versions:
    return pb.Versions(
        server=importlib.metadata.version("gonka-mlnode"),
        vllm=vllm.__version__,
        torch=torch.__version__,
        python=platform.python_version(),
        grpc=grpc.__version__,
    )
