"""Per-RPC metrics: the names and labels of go-grpc-prometheus (grpc_server_*), so that dashboards
made for it read these, plus time to first message, ErrorInfo reasons and active streams."""

from __future__ import annotations

import time
from dataclasses import dataclass

import grpc
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# Unary calls take milliseconds; a stream lasts as long as its generation (minutes at most).
HANDLING_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
)
# A stream's first message waits for tokenization, the engine's queue and the prefill.
FIRST_MESSAGE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
# grpc_type values, as go-grpc-prometheus names them.
RPC_TYPES = {
    (False, False): "unary",
    (False, True): "server_stream",
    (True, False): "client_stream",
    (True, True): "bidi_stream",
}
RPC_LABELS = ("grpc_type", "grpc_service", "grpc_method")
METHOD_LABELS = ("grpc_service", "grpc_method")


@dataclass(frozen=True)
class Rpc:
    service: str
    method: str
    type: str
    # A response stream: counted in the active streams, and its first message is timed.
    streams_responses: bool

    @classmethod
    def of(cls, path: str, request_streaming: bool, response_streaming: bool) -> Rpc:
        """`path` as gRPC names the method: `/package.Service/Method`."""
        service, _, method = path.lstrip("/").rpartition("/")
        return cls(service, method, RPC_TYPES[(request_streaming, response_streaming)], response_streaming)


class RpcMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self._started = Counter("grpc_server_started", "RPCs whose handler started.", RPC_LABELS, registry=registry)
        self._handled = Counter(
            "grpc_server_handled", "RPCs completed, by status code.", (*RPC_LABELS, "grpc_code"), registry=registry
        )
        self._handling = Histogram(
            "grpc_server_handling_seconds",
            "From the handler's start to the RPC's status, in seconds.",
            RPC_LABELS,
            registry=registry,
            buckets=HANDLING_BUCKETS,
        )
        self._first_message = Histogram(
            "grpc_server_first_message_seconds",
            "Response-streaming RPCs: from the handler's start to its first response message, in seconds.",
            METHOD_LABELS,
            registry=registry,
            buckets=FIRST_MESSAGE_BUCKETS,
        )
        self._errors = Counter(
            "grpc_server_errors",
            "RPCs that ended with a status other than OK, by code and google.rpc.ErrorInfo reason (NONE: no ErrorInfo).",
            (*METHOD_LABELS, "grpc_code", "reason"),
            registry=registry,
        )
        self._active = Gauge(
            "grpc_server_active_streams", "Response-streaming RPCs in progress.", METHOD_LABELS, registry=registry
        )

    def started(self, rpc: Rpc) -> float:
        """Returns the start time that first_message and finished take."""
        self._started.labels(rpc.type, rpc.service, rpc.method).inc()
        if rpc.streams_responses:
            self._active.labels(rpc.service, rpc.method).inc()
        return time.perf_counter()

    def first_message(self, rpc: Rpc, started: float) -> None:
        self._first_message.labels(rpc.service, rpc.method).observe(time.perf_counter() - started)

    def finished(self, rpc: Rpc, started: float, code: grpc.StatusCode, reason: str) -> None:
        self._handling.labels(rpc.type, rpc.service, rpc.method).observe(time.perf_counter() - started)
        self._handled.labels(rpc.type, rpc.service, rpc.method, code.name).inc()
        if code is not grpc.StatusCode.OK:
            self._errors.labels(rpc.service, rpc.method, code.name, reason).inc()
        if rpc.streams_responses:
            self._active.labels(rpc.service, rpc.method).dec()
