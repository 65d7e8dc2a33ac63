"""The engine instances as metrics: each one's state and the requests routed to it, and each one's own vLLM
metrics (vllm:*) with an `instance` label (engine_ext.engine_metrics keeps them apart per engine)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from server.core.instances import EngineInstances, InstanceState

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


class InstanceRegistries(Collector):
    """The instances' own registries (their vLLM metrics), collected through this one, every sample labelled with its
    instance. The instances hold the same names: each name becomes one family holding every instance's samples (the
    text format allows one TYPE line per name; Prometheus refuses a second).

    It describes no names, so the including registry checks none against its own (vllm:* here only)."""

    def __init__(self, registries: Sequence[tuple[int, CollectorRegistry]]) -> None:
        self._registries = registries

    def collect(self) -> Iterator[Metric]:
        families: dict[str, Metric] = {}
        for index, registry in self._registries:
            label = str(index)
            for metric in registry.collect():
                family = families.get(metric.name)
                if family is None:
                    family = families[metric.name] = Metric(metric.name, metric.documentation, metric.type, metric.unit)
                family.samples += [
                    sample._replace(labels={**sample.labels, INSTANCE_LABEL: label}) for sample in metric.samples
                ]
        yield from families.values()
