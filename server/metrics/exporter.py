"""Everything metrics in the server process, built only when --metrics-port is given: one registry
for the server's own metrics, the RPC interceptor, the PoC collector and the HTTP endpoint."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from server.metrics.callback_metrics import CallbackMetrics
from server.metrics.endpoint import MetricsEndpoint
from server.metrics.options import MetricsOptions
from server.metrics.poc_metrics import PocMetrics
from server.metrics.rpc_interceptor import MetricsInterceptor
from server.metrics.rpc_metrics import RpcMetrics
from server.poc.callback_sender import CallbackSender
from server.poc.round_control import RoundControl

log = logging.getLogger(__name__)


class ForwardedRegistry(Collector):
    """Another registry's metrics, collected through this one.

    vLLM's engine metrics live in the registry vLLM chose (prometheus_client's global one: its stat
    logger takes none), beside prometheus_client's process and garbage-collector metrics. The
    server's own metrics live in a registry of their own, made per server; this joins the two in one
    exposition. It describes no names, so the server's registry does not check names across the
    two, which never overlap (vllm:*, process_*, python_* there; grpc_server_*, mlnode_* here).
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry

    def collect(self) -> Iterable[Metric]:
        return self._registry.collect()


class ServerMetrics:
    def __init__(
        self,
        options: MetricsOptions,
        engine_registry: CollectorRegistry,
        rounds: RoundControl,
        callbacks: CallbackSender,
    ) -> None:
        self.registry = CollectorRegistry()
        # The first of the server's interceptors (server.metrics.rpc_interceptor says why).
        self.interceptor = MetricsInterceptor(RpcMetrics(self.registry))
        poc = PocMetrics(rounds)
        rounds.add_observer(poc)
        self.registry.register(poc)
        self.registry.register(CallbackMetrics(callbacks))
        self.registry.register(ForwardedRegistry(engine_registry))
        self._endpoint = MetricsEndpoint(self.registry, options)

    async def start(self, engine_logs_stats: bool) -> None:
        """Raises OSError when the endpoint's address cannot be bound."""
        await self._endpoint.start()
        log.info("metrics on http://%s/metrics", self._endpoint.address)
        if not engine_logs_stats:
            log.warning("vLLM keeps no statistics (--disable-log-stats): the metrics endpoint has no vllm:* metrics")

    async def stop(self) -> None:
        await self._endpoint.stop()
