"""The management API over the objects server.app builds (`--http-port`)."""

from __future__ import annotations

from engine_ext.model_facts import ModelFacts
from server.admission import Admission
from server.engine_failures import engine_failure
from server.http.app import PocRouting, management_app
from server.http.generate_jobs import GeneratedCallback, JobEngine
from server.http.generate_queue import GenerateQueue
from server.http.http_server import ManagementServer
from server.http.node_routes import NodeVersions
from server.http.node_state import NodeState, ServedModel
from server.http.options import HttpOptions
from server.instances import EngineInstances
from server.poc.artifact_validation import ValidatedCallback
from server.poc.callback_stream import CallbackSink
from server.poc.round_control import RoundControl
from server.poc.round_params import PocLimits


def management_server(
    options: HttpOptions,
    instances: EngineInstances,
    admission: Admission,
    control: RoundControl,
    facts: ModelFacts,
    limits: PocLimits,
    vllm_version: str,
    max_body_bytes: int,
    graceful_seconds: float,
    deliver_validated: ValidatedCallback,
    generated_callback: GeneratedCallback,
    stream: CallbackSink | None = None,
) -> ManagementServer:
    """`deliver_validated`, `generated_callback`: the generate jobs' callbacks through the durable store
    (PocComponents.deliver_validated, PocComponents.job_callback). `stream`: the pull stream's sink where it is
    served (server.app decides where)."""
    node = NodeState(control, instances, ServedModel(facts.served_model_name, facts.model_path))
    jobs = GenerateQueue(
        control.wait_until_idle, node.validation_job, lambda error: engine_failure(error, None, admission)
    )
    engine = JobEngine(instances, limits, deliver_validated, generated_callback)
    # Validation borrows KV blocks beside live inference wherever PoC is on (docs/poc.md).
    versions = NodeVersions(options.mlnode_version, vllm_version, poc_validation_inference=limits.enabled)
    routing = PocRouting(control, limits, options.port, jobs, engine, options.fraud_threshold, stream)
    app = management_app(node, instances, admission, versions, max_body_bytes, routing)
    # The jobs end before PoC shuts down (the server stops this listener first).
    return ManagementServer(app, options, graceful_seconds, on_stop=jobs.close)
