"""PoC metrics read off the round control: totals never go back when a round ends."""

from __future__ import annotations

from types import SimpleNamespace

from prometheus_client import CollectorRegistry

from gonka.mlnode.v1 import poc_pb2
from server.metrics.poc_metrics import PocMetrics
from server.poc.round.mining_round import RoundState


def test_rounds_nonces_and_the_running_rate() -> None:
    control = SimpleNamespace(running=None)
    metrics = PocMetrics(control)
    registry = CollectorRegistry()
    registry.register(metrics)
    sample = registry.get_sample_value

    def running(nonces: int, rate: float) -> SimpleNamespace:
        status = poc_pb2.RoundStatus(nonces_produced=nonces, nonces_per_second_last_minute=rate)
        return SimpleNamespace(state=RoundState.GENERATING, nonces_produced=nonces, status=lambda: status)

    assert (
        sample("mlnode_poc_nonces_total"),
        sample("mlnode_poc_round_running"),
        sample("mlnode_poc_nonces_per_second"),
    ) == (0, 0, 0)
    control.running = running(16, 4.0)
    metrics.round_started(control.running)
    assert (sample("mlnode_poc_rounds_started_total"), sample("mlnode_poc_nonces_total")) == (1, 16)
    assert (sample("mlnode_poc_round_running"), sample("mlnode_poc_nonces_per_second")) == (1, 4.0)
    # RoundControl tells observers while the round is still the running one, then lets it go.
    control.running.state = RoundState.STOPPED
    metrics.round_ended(control.running)
    control.running = None
    assert (
        sample("mlnode_poc_nonces_total") == 16 and sample("mlnode_poc_rounds_ended_total", {"outcome": "stopped"}) == 1
    )
    assert (sample("mlnode_poc_round_running"), sample("mlnode_poc_nonces_per_second")) == (0, 0)
