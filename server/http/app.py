"""The management API's application (`--http-port`; server.http.http_server serves it): built over the server's own
objects, so that a round started over HTTP is the round PocService reports, and the other way round."""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import FastAPI
from fastapi.routing import APIRoute
from prometheus_client import CollectorRegistry

from server.core.instances import EngineInstances
from server.http.body_limit import BodyLimit
from server.http.errors import install_error_handlers
from server.http.generate_jobs import JobEngine
from server.http.generate_queue import GenerateQueue
from server.http.generate_routes import generate_router
from server.http.gpu_routes import gpu_router
from server.http.inference_routes import InferenceObjects, inference_router
from server.http.metrics_routes import metrics_router
from server.http.node_routes import NodeVersions, node_router
from server.http.node_state import NodeState
from server.http.options import FraudThreshold
from server.http.pow_routes import pow_router
from server.http.probe_routes import probe_router
from server.http.unbuilt_routes import unbuilt_router
from server.http.version_prefix import VersionPrefix
from server.poc.batches.round_params import PocLimits
from server.poc.delivery.callback_stream import CallbackSink
from server.poc.gate.admission import Admission
from server.poc.round.round_control import RoundControl


@dataclass(frozen=True)
class PocRouting:
    """What the PoC routes drive beside the node state."""

    control: RoundControl
    limits: PocLimits
    # The management port: the deployed node names each backend, and each job id, by its port.
    port: int
    # The generate jobs: their queue, what they compute with, and the p-value that decides fraud.
    jobs: GenerateQueue
    engine: JobEngine
    fraud_threshold: FraudThreshold
    # The pull stream's sink, for callbacks without a URL; None where the stream is not served.
    stream: CallbackSink | None = None


def management_app(
    node: NodeState,
    instances: EngineInstances,
    admission: Admission,
    versions: NodeVersions,
    max_body_bytes: int,
    poc: PocRouting,
    metrics: CollectorRegistry,
    inference: InferenceObjects | None = None,
) -> FastAPI:
    """`metrics`: the server's Prometheus registry (server.metrics.exporter.ServerMetrics)."""
    # strict_content_type off: bodies are read as JSON whatever their Content-Type (server.http.json_body reads
    # them itself; this keeps FastAPI's own parsing, where a route uses it, to the same rule).
    app = FastAPI(title="gonka-mlnode management API", strict_content_type=False, openapi_url=None)
    app.include_router(probe_router(node, instances, admission))
    app.include_router(node_router(node, versions, poc.jobs))
    app.include_router(pow_router(node, poc.control, poc.limits, admission, instances, poc.port, poc.jobs, poc.stream))
    app.include_router(
        generate_router(node, poc.jobs, poc.engine, admission, poc.port, poc.fraud_threshold, poc.stream)
    )
    app.include_router(metrics_router(metrics))
    app.include_router(gpu_router())
    app.include_router(unbuilt_router())
    if inference is not None:
        # The deployed node proxies /v1/* on this port to its backends (spec section 0).
        app.include_router(inference_router(inference))
    install_error_handlers(app, admission)
    paths = [route.path for route in app.routes if isinstance(route, APIRoute)]
    # Each middleware added wraps those before it: the prefix is dropped first, then the body bound holds before
    # any route reads a body.
    app.add_middleware(BodyLimit, max_bytes=max_body_bytes)
    app.add_middleware(VersionPrefix, paths=paths)
    return app
