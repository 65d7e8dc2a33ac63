"""The management API over the objects server.app builds (`--http-port`)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from engine_ext.model_facts import ModelFacts
from server.admission import Admission
from server.http.app import PocRouting, management_app
from server.http.http_server import ManagementServer
from server.http.node_routes import NodeVersions
from server.http.node_state import NodeState, ServedModel
from server.http.options import HttpOptions
from server.instances import EngineInstances
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
    metrics: CollectorRegistry,
) -> ManagementServer:
    node = NodeState(control, instances, ServedModel(facts.served_model_name, facts.model_path))
    # Validation borrows KV blocks beside live inference wherever PoC is on (docs/poc.md).
    versions = NodeVersions(options.mlnode_version, vllm_version, poc_validation_inference=limits.enabled)
    app = management_app(
        node, instances, admission, versions, max_body_bytes, PocRouting(control, limits, options.port), metrics
    )
    return ManagementServer(app, options, graceful_seconds)
