"""The engine instances as metrics: each one's state and the requests routed to it, and each one's own vLLM
metrics (vllm:*) with an `instance` label (engine_ext.engine_metrics keeps them apart per engine)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from server.instances import EngineInstances, InstanceState

INSTANCE_LABEL = "instance"


class InstanceMetrics(Collector):
    def __init__(self, instances: EngineInstances) -> None:
        self._instances = instances

    def collect(self) -> Iterator[Metric]:
        states = GaugeMetricFamily(
            "mlnode_instance_state",
            "1 for each engine instance's current state (serving, stuck: a call into its engine unanswered past "
            "--engine-stuck-after, dead: its engine is gone), 0 for the others.",
            labels=[INSTANCE_LABEL, "state"],
        )
        routed = GaugeMetricFamily(
            "mlnode_instance_routed_requests",
            "Generate streams and ValidateInference replays sent to each engine instance that have not ended.",
            labels=[INSTANCE_LABEL],
        )
        for instance in self._instances:
            current = instance.state
            for state in InstanceState:
                states.add_metric([str(instance.index), state.value], int(state is current))
            routed.add_metric([str(instance.index)], instance.requests)
        yield states
        yield routed


class LabelledRegistry(Collector):
    """Another registry's metrics, collected through this one with one more label on every sample.

    It describes no names (so the including registry checks none across registries): the instances'
    registries hold the same vllm:* names, told apart by this label."""

    def __init__(self, registry: CollectorRegistry, label: str, value: str) -> None:
        self._registry = registry
        self._label = label
        self._value = value

    def collect(self) -> Iterator[Metric]:
        for metric in self._registry.collect():
            labelled = Metric(metric.name, metric.documentation, metric.type, metric.unit)
            labelled.samples = [sample._replace(labels={**sample.labels, self._label: self._value}) for sample in metric.samples]
            yield labelled
