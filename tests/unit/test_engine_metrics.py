"""Each engine's vLLM metrics survive the next engine's start: vLLM's Prometheus logger unregisters every vllm:
collector it finds first (its own unregister_vllm_metrics, called here as the next engine's logger calls it), and the
endpoint shows every engine's, labelled by instance. (End to end with two real engines: tests/e2e/test_instances.py.)"""

from __future__ import annotations

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge
from prometheus_client.exposition import generate_latest
from vllm.v1.metrics.prometheus import unregister_vllm_metrics

from engine_ext.engine_metrics import claim_engine_metrics
from server.metrics.instance_metrics import INSTANCE_LABEL, InstanceRegistries

RUNNING = "vllm:test_instances_running"
TOKENS = "vllm:test_instances_tokens"


def start_engine_metrics() -> tuple[Gauge, Counter]:
    """What an engine's start does to the global registry: its logger unregisters every vllm: collector, then
    creates its own there."""
    unregister_vllm_metrics()
    return (Gauge(RUNNING, "requests running", ["engine"]), Counter(TOKENS, "tokens", ["engine"]))


def test_every_engines_metrics_stay_readable_after_the_next_engine_starts() -> None:
    first_running, first_tokens = start_engine_metrics()
    first = claim_engine_metrics()
    second_running, _second_tokens = start_engine_metrics()
    second = claim_engine_metrics()
    try:
        first_running.labels("0").set(3)
        first_tokens.labels("0").inc(10)
        second_running.labels("0").set(5)
        assert first.get_sample_value(RUNNING, {"engine": "0"}) == 3
        assert first.get_sample_value(f"{TOKENS}_total", {"engine": "0"}) == 10
        assert second.get_sample_value(RUNNING, {"engine": "0"}) == 5
        assert REGISTRY.get_sample_value(RUNNING, {"engine": "0"}) is None  # the global registry keeps none of them

        endpoint = CollectorRegistry()
        endpoint.register(InstanceRegistries([(0, first), (1, second)]))
        assert endpoint.get_sample_value(RUNNING, {"engine": "0", INSTANCE_LABEL: "0"}) == 3
        assert endpoint.get_sample_value(RUNNING, {"engine": "0", INSTANCE_LABEL: "1"}) == 5
        text = generate_latest(endpoint).decode()
        assert f'{TOKENS}_total{{engine="0",instance="0"}} 10.0' in text
        # One family per name, holding both instances' samples: Prometheus refuses a second TYPE line for a name.
        assert text.count(f"# TYPE {RUNNING} gauge") == 1 and text.count(f"# TYPE {TOKENS}_total counter") == 1
    finally:
        unregister_vllm_metrics()


def test_without_claiming_the_next_engine_drops_the_first_ones() -> None:
    """vLLM's own behaviour, which the claim works around: the first engine's metrics leave every scrape."""
    first_running, _ = start_engine_metrics()
    first_running.labels("0").set(3)
    assert REGISTRY.get_sample_value(RUNNING, {"engine": "0"}) == 3
    second_running, _ = start_engine_metrics()
    try:
        second_running.labels("0").set(5)
        assert REGISTRY.get_sample_value(RUNNING, {"engine": "0"}) == 5  # the first engine's 3 is nowhere
    finally:
        unregister_vllm_metrics()
