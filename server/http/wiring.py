"""The HTTP listeners over the objects server.app builds: the management API (`--http-port`) and the inference
port (`--inference-port`), both over one NodeState, so that `/api/v1/stop` stops the inference port too."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry

from engine_ext.model_facts import ModelFacts
from server.core.instances import EngineInstances
from server.core.request_registry import RequestRegistry
from server.http.app import PocRouting, management_app
from server.http.generate_jobs import GeneratedCallback, JobEngine
from server.http.generate_queue import GenerateQueue
from server.http.http_server import ManagementServer
from server.http.inference_app import inference_app
from server.http.inference_routes import InferenceObjects
from server.http.node_routes import NodeVersions
from server.http.node_state import NodeState, ServedModel
from server.http.options import HttpOptions, InferencePortOptions
from server.poc.batches.round_params import PocLimits
from server.poc.delivery.callback_stream import CallbackSink
from server.poc.gate.admission import Admission
from server.poc.round.round_control import RoundControl
from server.poc.validation.artifact_validation import ValidatedCallback
from server.translation import RequestTranslator
from server.translation.engine_failures import engine_failure
from server.translation.prompt import PromptReader


@dataclass(frozen=True)
class InferencePath:
    """The gRPC InferenceService's own objects, which the OpenAI-style endpoints run requests through."""

    translator: RequestTranslator
    prompts: PromptReader
    registry: RequestRegistry


def http_servers(
    options: HttpOptions | None,
    inference_options: InferencePortOptions | None,
    instances: EngineInstances,
    admission: Admission,
    control: RoundControl,
    facts: ModelFacts,
    limits: PocLimits,
    inference_path: InferencePath,
    vllm_version: str,
    max_body_bytes: int,
    graceful_seconds: float,
    deliver_validated: ValidatedCallback,
    generated_callback: GeneratedCallback,
    metrics: CollectorRegistry | None,
    stream: CallbackSink | None = None,
) -> list[ManagementServer]:
    """The listeners the flags ask for (none without either flag). `deliver_validated`, `generated_callback`: the
    generate jobs' callbacks through the durable store (PocComponents.deliver_validated, PocComponents.job_callback).
    `metrics`: the registry /api/v1/metrics serves (present whenever `options` is: ServerOptions.records_metrics).
    `stream`: the pull stream's sink where it is served (server.app decides where)."""
    node = NodeState(control, instances, ServedModel(facts.served_model_name, facts.model_path))
    inference = InferenceObjects(
        node,
        instances,
        facts,
        inference_path.translator,
        inference_path.prompts,
        inference_path.registry,
        admission,
    )
    servers = []
    if options is not None:
        assert metrics is not None  # --http-port records metrics (ServerOptions.records_metrics)
        jobs = GenerateQueue(
            control.wait_until_idle, node.validation_job, lambda error: engine_failure(error, None, admission)
        )
        engine = JobEngine(instances, limits, deliver_validated, generated_callback)
        # Validation borrows KV blocks beside live inference wherever PoC is on (docs/poc.md).
        versions = NodeVersions(options.mlnode_version, vllm_version, poc_validation_inference=limits.enabled)
        routing = PocRouting(control, limits, options.port, jobs, engine, options.fraud_threshold, stream)
        app = management_app(node, instances, admission, versions, max_body_bytes, routing, metrics, inference)
        # The jobs end before PoC shuts down (the server stops this listener first).
        servers.append(ManagementServer(app, options, graceful_seconds, on_stop=jobs.close))
    if inference_options is not None:
        servers.append(
            ManagementServer(
                inference_app(inference, max_body_bytes),
                inference_options,
                graceful_seconds,
                label="inference port",
                flag="--inference-port",
            )
        )
    return servers
