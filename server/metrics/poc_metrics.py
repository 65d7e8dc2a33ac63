"""PoC rounds as metrics: rounds started and ended, nonces produced, the running round's rate.

A custom collector over the round control: nothing is counted per batch; each scrape reads the
running round's own status, and the observer hooks (round started, round ended) keep the totals
of the rounds that have ended.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from server.poc.round.mining_round import MiningRound


class RunningRound(Protocol):
    @property
    def running(self) -> MiningRound | None: ...


class PocMetrics(Collector):
    """A RoundObserver (server.poc.round.round_control) and a Prometheus collector."""

    def __init__(self, control: RunningRound) -> None:
        self._control = control
        self._started = 0
        self._ended: Counter[str] = Counter()
        self._ended_nonces = 0

    def round_started(self, mining: MiningRound) -> None:
        self._started += 1

    def round_ended(self, mining: MiningRound) -> None:
        # Called while the round is still the running one (RoundControl calls it before letting go),
        # so a scrape never sees its nonces twice or not at all: the total never goes back.
        self._ended[mining.state.name.lower()] += 1
        self._ended_nonces += mining.nonces_produced

    def collect(self) -> Iterator[Metric]:
        running = self._control.running
        status = running.status() if running is not None else None
        yield CounterMetricFamily("mlnode_poc_rounds_started", "PoC mining rounds started.", value=self._started)
        ended = CounterMetricFamily(
            "mlnode_poc_rounds_ended", "PoC mining rounds ended, by outcome (stopped or failed).", labels=["outcome"]
        )
        for outcome, count in sorted(self._ended.items()):
            ended.add_metric([outcome], count)
        yield ended
        produced = self._ended_nonces + (status.nonces_produced if status is not None else 0)
        yield CounterMetricFamily(
            "mlnode_poc_nonces", "Nonces produced by PoC mining rounds (published artifacts).", value=produced
        )
        yield GaugeMetricFamily(
            "mlnode_poc_round_running", "1 while a PoC mining round runs.", value=int(running is not None)
        )
        yield GaugeMetricFamily(
            "mlnode_poc_nonces_per_second",
            "The running round's nonces per second over its last minute (0 when no round runs).",
            value=status.nonces_per_second_last_minute if status is not None else 0.0,
        )
