"""Callback delivery as metrics: entries delivered and given up (by why), failed POST attempts, and the entries
the durable callback store still holds for delivery. Read from the sender at each scrape."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from server.poc.delivery.callback_sender import CallbackSender, GiveUpReason

GIVE_UP_REASONS = (GiveUpReason.REJECTED, GiveUpReason.EXPIRED, GiveUpReason.UNSENDABLE)


class CallbackMetrics(Collector):
    def __init__(self, sender: CallbackSender) -> None:
        self._sender = sender

    def collect(self) -> Iterator[Metric]:
        sender = self._sender
        yield CounterMetricFamily(
            "mlnode_poc_callback_entries_delivered",
            "Callback store entries the receiver accepted (this process).",
            value=sender.delivered_entries,
        )
        given_up = CounterMetricFamily(
            "mlnode_poc_callback_entries_given_up",
            "Callback store entries given up (this process), by why: rejected (the receiver answered 4xx), expired "
            "(undelivered after 24 h), unsendable (a URL or body that cannot be sent).",
            labels=["reason"],
        )
        artifacts = CounterMetricFamily(
            "mlnode_poc_callback_artifacts_given_up",
            "Artifacts in the callback entries given up (this process), by why.",
            labels=["reason"],
        )
        for reason in GIVE_UP_REASONS:
            given_up.add_metric([reason], sender.given_up_entries[reason])
            artifacts.add_metric([reason], sender.given_up_artifacts[reason])
        yield given_up
        yield artifacts
        yield CounterMetricFamily(
            "mlnode_poc_callback_failed_attempts",
            "Callback POST attempts that failed (this process), each retry counted.",
            value=sender.failed_attempts,
        )
        yield GaugeMetricFamily(
            "mlnode_poc_callback_entries_pending",
            "Callback store entries not yet delivered nor given up.",
            value=sender.pending_entries(),
        )
