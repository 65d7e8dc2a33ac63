"""The server process: engines first (vLLM forks; one per instance, one after the other), then the gRPC
server, then serve until told to stop."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from engine_ext.consensus.logprobs_mode import LogprobsMode
from engine_ext.device_slices import DeviceSlice, InstancesUnsupported, plan_instances
from engine_ext.engine import ExtensionMissing, MlnodeEngine
from engine_ext.engine_args import EngineSettings
from engine_ext.engine_calls import EngineCalls
from engine_ext.engine_factory import EngineConfigurationError, create_engine
from engine_ext.hang_watch import HangRule
from engine_ext.plugin import plugin_not_loadable
from engine_ext.runtime import cache_vllm_environment, component_versions, freeze_startup_heap
from engine_ext.seams.vllm_version import UnsupportedVllmVersion
from gonka.mlnode.v1 import inference_pb2 as pb
from gonka.mlnode.v1 import poc_pb2
from gonka.mlnode.v1 import validation_pb2 as vpb
from server.core.auth import AuthInterceptor, Authorizer
from server.core.health import HealthService
from server.core.instances import EngineInstance, EngineInstances, instance_health_name
from server.core.reflection import enable_reflection
from server.core.request_registry import RequestRegistry
from server.core.service_registration import add_raw_request_service
from server.core.shutdown import ShutdownTrigger
from server.credentials import ServerCredentials, TlsMaterial
from server.engine_watch import watch_instances
from server.http.options import HttpOptions
from server.http.wiring import InferencePath, http_servers
from server.metrics.exporter import ServerMetrics
from server.options import ServerOptions
from server.poc.batches.batch_runner import PocBatchRunner
from server.poc.delivery.callback_store import CallbackStore, StoreUnreadable
from server.poc.delivery.callback_stream import CallbackBuffer
from server.poc.delivery.callback_stream_servicer import SERVICE_NAME as CALLBACK_STREAM_SERVICE
from server.poc.delivery.callback_stream_servicer import CallbackStreamListener, add_callback_stream
from server.poc.delivery.store_lock import StoreLock
from server.poc.gate.admission import Admission
from server.poc.gate.gate_interceptor import GateInterceptor
from server.poc.options import PocOptions
from server.poc.wiring import PocComponents, poc_limits
from server.services.inference_servicer import InferenceServicer
from server.services.validation_servicer import ValidationServicer
from server.translation import RequestTranslator
from server.translation.chat_template import client_template_variables
from server.translation.prompt import PromptLimits, PromptReader
from server.translation.tokenizer_pool import TokenizerPool

log = logging.getLogger(__name__)

INFERENCE_SERVICE = pb.DESCRIPTOR.services_by_name["InferenceService"]
VALIDATION_SERVICE = vpb.DESCRIPTOR.services_by_name["ValidationService"]
POC_SERVICE = poc_pb2.DESCRIPTOR.services_by_name["PocService"]
HEALTH_CHECKED_SERVICES = ("", INFERENCE_SERVICE.full_name, VALIDATION_SERVICE.full_name, POC_SERVICE.full_name)
# NOT_SERVING while a mining round runs (ValidationService stays SERVING: ValidatePocArtifacts runs
# during rounds, and ValidateInference is refused by the gate itself).
GATED_SERVICES = (INFERENCE_SERVICE.full_name,)
# Inference on the engine: refused while a mining round runs.
GATED_METHODS = (
    f"/{INFERENCE_SERVICE.full_name}/Generate",
    f"/{VALIDATION_SERVICE.full_name}/ValidateInference",
)
# After the grace, aborted streams get this long to deliver their final (abort) message.
ABORT_FLUSH_SECONDS = 2.0
MAX_SEND_MESSAGE_BYTES = 64 * 1024 * 1024
# The default prompt bound: generous for any text that fits the context (English runs at about
# 4 characters per token), while keeping the tokenization of a refused prompt short.
DEFAULT_PROMPT_CHARS_PER_TOKEN = 16
# gRPC's default: the third ping that comes too early ends the connection.
MAX_PING_STRIKES = 2


def grpc_server_options(options: ServerOptions) -> tuple[tuple[str, Any], ...]:
    return (
        # A second server must fail to bind, not silently share the port.
        ("grpc.so_reuseport", 0),
        ("grpc.max_send_message_length", MAX_SEND_MESSAGE_BYTES),
        # Larger requests get RESOURCE_EXHAUSTED from grpc itself, before any handler runs.
        ("grpc.max_receive_message_length", options.max_request_bytes),
        # The server pings every connection, quiet streams included, and closes one whose peer no
        # longer answers; a live client answers by itself, so a stream may stay silent for as long
        # as it needs (a long prompt, a full queue, a coalesce window).
        ("grpc.keepalive_time_ms", _milliseconds(options.keepalive_time_seconds)),
        ("grpc.keepalive_timeout_ms", _milliseconds(options.keepalive_timeout_seconds)),
        ("grpc.keepalive_permit_without_calls", 1),
        # The server's own pings continue however long it has sent no data.
        ("grpc.http2.max_pings_without_data", 0),
        # Client pings: one per interval is allowed while the server sends nothing; each earlier one
        # is a strike, and one strike past the limit ends the connection with GOAWAY (too_many_pings).
        ("grpc.http2.min_ping_interval_without_data_ms", _milliseconds(options.keepalive_min_ping_interval_seconds)),
        ("grpc.http2.max_ping_strikes", MAX_PING_STRIKES),
    )


def _milliseconds(seconds: float) -> int:
    return max(1, round(seconds * 1000))


class StartupError(RuntimeError):
    pass


async def serve(
    options: ServerOptions, credentials: ServerCredentials, engine_args: EngineSettings, store_lock: StoreLock
) -> int:
    """`store_lock`: the callback store's, claimed by the caller; the store is opened (and closed) here."""
    # Installed before the engines' blocking starts: a signal that arrives meanwhile is only noted
    # (a Python-level handler raising inside vLLM's startup poll would be swallowed) and acted on
    # once the engines are up, so their processes are always shut down, never orphaned.
    trigger = ShutdownTrigger()
    trigger.install_signal_handlers()
    not_loadable = plugin_not_loadable()
    if not_loadable:
        raise StartupError(not_loadable)
    slices = _device_slices(options, engine_args)
    engines: list[MlnodeEngine] = []
    try:
        try:
            for device_slice in slices:
                if len(slices) > 1:
                    log.info(
                        "starting engine instance %d of %d on %s",
                        device_slice.index,
                        len(slices),
                        device_slice.describe(),
                    )
                engines.append(_start_engine(options, engine_args, device_slice))
        except (EngineConfigurationError, UnsupportedVllmVersion) as error:
            raise StartupError(str(error)) from error
        instances = EngineInstances(
            [
                EngineInstance(
                    device_slice.index,
                    engine,
                    PocBatchRunner(engine, options.poc.block_wait_seconds),
                    device_slice.describe(),
                    len(slices) == 1,
                    HangRule(options.engine_hang_grace_seconds),
                )
                for device_slice, engine in zip(slices, engines)
            ],
            options.min_instances,
        )
        return await _serve_engines(instances, options, credentials, trigger, store_lock)
    finally:
        for engine in engines:
            engine.shutdown()


def _device_slices(options: ServerOptions, engine_args: EngineSettings) -> list[DeviceSlice]:
    vllm_args = engine_args.vllm_args
    try:
        slices = plan_instances(
            options.instances,
            vllm_args.tensor_parallel_size * vllm_args.pipeline_parallel_size,
            vllm_args.data_parallel_size,
        )
    except InstancesUnsupported as error:
        raise StartupError(str(error)) from error
    if options.min_instances > len(slices):
        raise StartupError(
            f"--min-instances {options.min_instances} is more than the {len(slices)} instance(s) this server runs"
        )
    return slices


def _start_engine(options: ServerOptions, engine_args: EngineSettings, device_slice: DeviceSlice) -> MlnodeEngine:
    # Each engine's own calls: one stuck engine makes its instance alone NOT_SERVING.
    calls = EngineCalls(options.engine_call_timeout_seconds, options.engine_stuck_seconds)
    # With metrics, token streams feed vLLM's per-request metrics too (about 2 µs a token).
    request_metrics = options.records_metrics
    return create_engine(
        engine_args,
        calls,
        # The flag names the members, lower-cased (options.LOGPROBS_MODES).
        LogprobsMode[options.default_logprobs_mode.upper()],
        request_metrics,
        options.poc.compiled_forward,
        options.poc.enabled,
        device_slice,
    )


async def _prepare_poc_forward(instances: EngineInstances, poc: PocOptions) -> None:
    """Refuses a model the PoC forward has no decoder for (unless PoC is off), then runs the forward's first batches
    before serving: the first instance alone (inductor's on-disk cache then holds the graphs), the others side by
    side. Compiled, they compile it; eager on a GPU, they compile the kernels the model's layers build on first use
    (DeepSeek-V4's TileLang and Triton kernels took over 30 s in a first round batch on an H200), so that a round's
    first batch does not wait on them. Eager on a CPU nothing compiles at run time."""
    if not poc.enabled:
        log.info("PoC is off (--poc-forward off): PocService and ValidatePocArtifacts refuse every call")
        return
    # Every instance serves the same model: the first one's workers speak for all.
    report = await instances.first.engine.poc_decoder()
    if report.unsupported:
        raise StartupError(report.unsupported)
    log.info("PoC forward: %s on %s", report.decoder, report.architecture)
    engine = instances.first.engine
    compiling = engine.poc_compiled and report.compiles
    if compiling:
        log.info("compiling the PoC forward (torch.compile; --poc-forward eager skips it)")
    else:
        eagerly = (
            f"vLLM runs {report.architecture} eagerly, and so does the PoC forward"
            if engine.poc_compiled
            else "the PoC forward runs eagerly (--poc-forward eager)"
        )
        if engine.on_cpu:
            log.info("%s: nothing to compile", eagerly)
            return
        log.info("%s: its first batches compile the kernels the layers build on first use", eagerly)
    started = time.monotonic()
    try:
        result = await engine.prepare_poc_forward()
        await asyncio.gather(*(instance.engine.prepare_poc_forward() for instance in list(instances)[1:]))
    except Exception as error:  # torch.compile's and the kernel compilers' failures have no common base class
        way_out = "--poc-forward eager runs it uncompiled" if compiling else "--poc-forward off serves inference only"
        raise StartupError(f"the PoC forward's first batches failed ({error}); {way_out}") from error
    if not compiling:
        log.info("PoC forward's first batches ran in %.1f s", time.monotonic() - started)
        return
    log.info(
        "PoC forward compiled in %.1f s (%d graphs, %.1f s of it in inductor, on the first instance)",
        time.monotonic() - started,
        result.compiled_graphs,
        result.compile_seconds,
    )


async def _serve_engines(
    instances: EngineInstances,
    options: ServerOptions,
    credentials: ServerCredentials,
    trigger: ShutdownTrigger,
    store_lock: StoreLock,
) -> int:
    try:
        await asyncio.gather(*(instance.engine.require_extension() for instance in instances))
    except ExtensionMissing as error:
        raise StartupError(str(error)) from error
    await _prepare_poc_forward(instances, options.poc)
    # Every instance serves the same model with the same flags.
    engine = instances.first.engine
    facts = engine.model_facts()
    tokenizer = engine.tokenizer()
    limits = PromptLimits(
        max_chars=options.max_prompt_chars or DEFAULT_PROMPT_CHARS_PER_TOKEN * facts.max_model_len,
        template_variables=client_template_variables(tokenizer),
    )
    tokenizers = TokenizerPool(tokenizer, thread_safe=engine.tokenizer_is_thread_safe())
    registry = RequestRegistry()
    admission = Admission(options.max_concurrent_streams)
    authorizer = Authorizer(credentials.auth_token)
    health = HealthService()
    try:
        store = CallbackStore(store_lock)
    except StoreUnreadable as error:
        raise StartupError(str(error)) from error
    poc = PocComponents(
        instances,
        poc_limits(facts, len(instances), options.poc.enabled),
        admission,
        health,
        GATED_SERVICES,
        POC_SERVICE.full_name,
        options.poc,
        store,
    )
    prompts = PromptReader(facts, limits, tokenizers)
    translator = RequestTranslator(facts, prompts)
    versions = pb.Versions(**component_versions(), grpc=grpc.__version__)
    servicer = InferenceServicer(
        instances, facts, limits, options.max_request_bytes, translator, registry, admission, versions, authorizer
    )

    metrics = ServerMetrics(options.metrics, instances, poc.control, poc.sender) if options.records_metrics else None
    # Authorization first: a refused caller reaches no other interceptor and learns nothing else.
    # Metrics before it: they only watch, and count refused calls with their code and reason too.
    interceptors = (
        *(() if metrics is None else (metrics.interceptor,)),
        AuthInterceptor(authorizer),
        GateInterceptor(admission.gate, GATED_METHODS),
    )
    server = grpc.aio.server(interceptors=interceptors, options=grpc_server_options(options))
    add_raw_request_service(server, INFERENCE_SERVICE, servicer)
    validation = ValidationServicer(
        instances, facts, translator, admission, registry, poc.limits, poc.deliver_validated
    )
    add_raw_request_service(server, VALIDATION_SERVICE, validation)
    add_raw_request_service(server, POC_SERVICE, poc.servicer)
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    health_service = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name
    reflected: tuple[str, ...] = (
        INFERENCE_SERVICE.full_name,
        VALIDATION_SERVICE.full_name,
        POC_SERVICE.full_name,
        health_service,
    )
    stream, stream_listener = (None, None) if options.http is None else _callback_stream(options.http, credentials)
    if stream is not None and stream_listener is None:
        add_callback_stream(server, stream)
        reflected += (CALLBACK_STREAM_SERVICE,)
    enable_reflection(server, reflected)
    try:
        _listen(server, options.address, credentials.tls)
    except RuntimeError as error:
        raise StartupError(f"cannot listen on {options.address}: {error}") from error
    if stream_listener is not None:
        try:
            await stream_listener.start()
        except RuntimeError as error:
            raise StartupError(
                f"cannot listen on {stream_listener.address} (--callback-stream-port): {error}"
            ) from error
    if metrics is not None:
        try:
            await metrics.start(engine.logs_stats)
        except OSError as error:
            raise StartupError(f"cannot listen on {metrics.endpoint_address} (--metrics-port): {error}") from error
    http = http_servers(
        options.http,
        options.inference,
        instances,
        admission,
        poc.control,
        facts,
        poc.limits,
        InferencePath(translator, prompts, registry),
        versions.vllm,
        options.max_request_bytes,
        ABORT_FLUSH_SECONDS,
        poc.deliver_validated,
        poc.job_callback,
        # The management API serves them (records_metrics): present whenever --http-port is given.
        None if metrics is None else metrics.registry,
        stream,
    )
    for listener in http:
        try:
            await listener.start()
        except OSError as error:
            raise StartupError(f"cannot listen on {listener.address} ({listener.flag}): {error}") from error
    if http and (credentials.tls is not None or credentials.auth_token is not None):
        # The API node speaks plain HTTP without a token to its ML nodes (docs/http-api.md).
        log.warning(
            "the HTTP ports (%s) are plain HTTP without a token: TLS and the auth token protect the gRPC port "
            "alone; let only the API node reach them",
            ", ".join(listener.address for listener in http),
        )
    freeze_startup_heap()
    cache_vllm_environment()
    await server.start()
    for service in (*HEALTH_CHECKED_SERVICES, *(instance_health_name(instance.index) for instance in instances)):
        await health.set(service, health_pb2.HealthCheckResponse.SERVING)
    log.info(
        "serving %s on %s (%s; %d engine instance(s))",
        facts.served_model_name,
        options.address,
        credentials.summary(),
        len(instances),
    )

    poc.sender.start()
    background = [
        asyncio.create_task(
            watch_instances(instances, trigger, health, HEALTH_CHECKED_SERVICES, admission, GATED_SERVICES)
        )
    ]
    if engine.logs_stats:
        background += [asyncio.create_task(_log_engine_stats(instance.engine)) for instance in instances]
    await trigger.wait()
    for task in background:
        task.cancel()
    log.info("shutting down (%s)", trigger.reason)
    admission.close()
    await health.enter_graceful_shutdown()
    # Before PoC stops: no HTTP request starts work after this; those in flight get the flush grace.
    for listener in http:
        await listener.stop()
    # A running round stops (its forward in flight returns; subscribers get their final message) and
    # callbacks get a bounded flush; what the receivers did not take stays in the callback store.
    await poc.shutdown()
    # After the round's last batches: the consumer's stream ends (what it has not acknowledged is lost, as deployed).
    if stream is not None:
        stream.close()
    if stream_listener is not None:
        await stream_listener.stop(ABORT_FLUSH_SECONDS)
    await _drain(instances, registry, trigger, options.shutdown_grace_seconds)
    await server.stop(grace=ABORT_FLUSH_SECONDS)
    poc.close()
    if metrics is not None:
        await metrics.stop()
    tokenizers.close()
    log.info("stopped")
    return trigger.exit_code


def _callback_stream(
    http: HttpOptions, credentials: ServerCredentials
) -> tuple[CallbackBuffer | None, CallbackStreamListener | None]:
    """The API node's pull stream, for rounds it gives no url, and its own listener where it has one: on
    --callback-stream-port when given; else on the gRPC port when the API node can dial that (it speaks plaintext
    without a token); else not served (those rounds' artifacts reach gRPC subscribers alone)."""
    address = http.callback_stream_address
    if address is not None:
        buffer = CallbackBuffer()
        return buffer, CallbackStreamListener(buffer, address)
    if credentials.tls is None and credentials.auth_token is None:
        log.info("pull callback stream %s on the gRPC port", CALLBACK_STREAM_SERVICE)
        return CallbackBuffer(), None
    log.warning(
        "the pull callback stream is not served: the gRPC port has TLS or a token, which the API node's stream "
        "client does not use; give --callback-stream-port (plaintext, %s by default) to serve it",
        http.callback_stream_host,
    )
    return None, None


def _listen(server: grpc.aio.Server, address: str, tls: TlsMaterial | None) -> None:
    if tls is None:
        server.add_insecure_port(address)
    else:
        server.add_secure_port(address, tls.server_credentials())


async def _drain(instances: EngineInstances, registry: RequestRegistry, trigger: ShutdownTrigger, grace: float) -> None:
    """In-flight streams run until done or the grace ends; then every living instance's engine is paused,
    which aborts every request in flight on both output paths (their clients receive a final
    FINISH_REASON_ABORT message rather than a cut connection) and refuses those still being tokenized."""
    drained = asyncio.create_task(registry.wait_until_empty(grace))
    forced = asyncio.create_task(trigger.wait_forced())
    await asyncio.wait((drained, forced), return_when=asyncio.FIRST_COMPLETED)
    forced.cancel()
    if drained.done() and drained.result():
        return
    drained.cancel()
    if instances.living():
        aborted = await instances.pause()
        log.info("aborted %d in-flight request(s)", aborted)
        await registry.wait_until_empty(ABORT_FLUSH_SECONDS)


async def _log_engine_stats(engine: MlnodeEngine) -> None:
    while True:
        await asyncio.sleep(engine.log_stats_interval_seconds)
        await engine.log_stats()
