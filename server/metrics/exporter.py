"""Everything metrics in the server process, built only when --metrics-port or --http-port is given: one
registry for the server's own metrics, the RPC interceptor, the PoC and instance collectors, every engine
instance's vLLM metrics (labelled `instance`), and the HTTP endpoint with --metrics-port (the management API
serves the same registry at /api/v1/metrics: server.http.metrics_routes)."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from server.core.instances import EngineInstances
from server.metrics.callback_metrics import CallbackMetrics
from server.metrics.endpoint import MetricsEndpoint
from server.metrics.instance_metrics import InstanceMetrics, InstanceRegistries
from server.metrics.options import MetricsOptions
from server.metrics.poc_metrics import PocMetrics
from server.metrics.rpc_interceptor import MetricsInterceptor
from server.metrics.rpc_metrics import RpcMetrics
from server.poc.delivery.callback_sender import CallbackSender
from server.poc.round.round_control import RoundControl

log = logging.getLogger(__name__)


class ForwardedRegistry(Collector):
    """Another registry's metrics, collected through this one.

    prometheus_client's process and garbage-collector metrics live in its global registry (each
    engine's vLLM metrics were moved out of it into the engine's own: engine_ext.engine_metrics). The
    server's own metrics live in a registry of their own, made per server; this joins the two in one
    exposition. It describes no names, so the server's registry does not check names across the
    two, which never overlap (process_*, python_* there; grpc_server_*, mlnode_* here).
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry

    def collect(self) -> Iterable[Metric]:
        return self._registry.collect()


class ServerMetrics:
    def __init__(
        self,
        options: MetricsOptions | None,
        instances: EngineInstances,
        rounds: RoundControl,
        callbacks: CallbackSender,
    ) -> None:
        """`options`: the metrics port's; None, no endpoint of its own (the management API serves the registry)."""
        self.registry = CollectorRegistry()
        # The first of the server's interceptors (server.metrics.rpc_interceptor says why).
        self.interceptor = MetricsInterceptor(RpcMetrics(self.registry))
        poc = PocMetrics(rounds)
        rounds.add_observer(poc)
        self.registry.register(poc)
        self.registry.register(CallbackMetrics(callbacks))
        self.registry.register(InstanceMetrics(instances))
        self.registry.register(ForwardedRegistry(REGISTRY))
        self.registry.register(
            InstanceRegistries([(instance.index, instance.engine.metrics_registry()) for instance in instances])
        )
        self._endpoint = None if options is None else MetricsEndpoint(self.registry, options)

    @property
    def endpoint_address(self) -> str | None:
        return None if self._endpoint is None else self._endpoint.address

    async def start(self, engine_logs_stats: bool) -> None:
        """Raises OSError when the endpoint's address cannot be bound."""
        if self._endpoint is not None:
            await self._endpoint.start()
            log.info("metrics on http://%s/metrics", self._endpoint.address)
        if not engine_logs_stats:
            log.warning("vLLM keeps no statistics (--disable-log-stats): the metrics endpoint has no vllm:* metrics")

    async def stop(self) -> None:
        if self._endpoint is not None:
            await self._endpoint.stop()
