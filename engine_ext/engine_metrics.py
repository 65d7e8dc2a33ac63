"""Each engine's own vLLM metrics (vllm:*), kept apart from the next engine's.

vLLM's PrometheusStatLogger creates its metrics in prometheus_client's global registry (it takes no
registry), and its constructor first unregisters every vllm: collector found there
(vllm.v1.metrics.prometheus.unregister_vllm_metrics): a second engine started in the same process would
drop the first one's metrics from every scrape, while the first engine kept updating them unseen. So once
an engine is up, its collectors move from the global registry into one of its own: the next engine's
logger finds none of them to unregister, and each engine's metrics stay readable through its registry.
"""

from __future__ import annotations

import os

from prometheus_client import REGISTRY, CollectorRegistry
from vllm.v1.metrics.prometheus import get_prometheus_registry

from engine_ext.device_slices import PROMETHEUS_MULTIPROC_VARIABLE

VLLM_METRIC_PREFIX = "vllm:"


def claim_engine_metrics() -> CollectorRegistry:
    """The vllm: collectors now in the global registry (those of the engine just started), moved into a
    registry of their own; returns the registry that exposes them. Call right after each engine's start.

    With PROMETHEUS_MULTIPROC_DIR (one instance only: engine_ext.device_slices refuses more), the values
    live in vLLM's multiprocess files, read through the registry vLLM's own server reads them with."""
    own = CollectorRegistry()
    # prometheus_client has no public listing of a registry's collectors; vLLM's unregister_vllm_metrics
    # reads this same mapping.
    for collector, names in list(REGISTRY._collector_to_names.items()):
        if any(name.startswith(VLLM_METRIC_PREFIX) for name in names):
            REGISTRY.unregister(collector)
            own.register(collector)
    if os.environ.get(PROMETHEUS_MULTIPROC_VARIABLE):
        return get_prometheus_registry()
    return own
