"""The metrics endpoint's flags (imports no engine: the CLI parses flags before vLLM loads)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from server.core.net_address import listen_address

MAX_PORT = 65535


@dataclass(frozen=True)
class MetricsOptions:
    host: str
    port: int

    @property
    def address(self) -> str:
        return listen_address(self.host, self.port)


def add_metrics_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("metrics", "Prometheus metrics over HTTP (off unless --metrics-port is given)")
    group.add_argument(
        "--metrics-port",
        type=parse_port,
        default=None,
        metavar="PORT",
        help="serve Prometheus metrics at http://HOST:PORT/metrics: vLLM's engine metrics, per-RPC metrics and PoC "
        "rounds (default: no metrics endpoint)",
    )
    group.add_argument(
        "--metrics-host",
        default=None,
        metavar="HOST",
        help="address the metrics endpoint listens on, with --metrics-port (default: the server's --host)",
    )


def metrics_options_from(namespace: argparse.Namespace) -> MetricsOptions | None:
    """None without --metrics-port: no endpoint, and no metrics are recorded at all."""
    if namespace.metrics_port is None:
        return None
    return MetricsOptions(namespace.metrics_host or namespace.host, namespace.metrics_port)


def parse_port(text: str) -> int:
    value = int(text)
    if not 1 <= value <= MAX_PORT:
        raise argparse.ArgumentTypeError(f"must be a port number from 1 to {MAX_PORT}, got {text!r}")
    return value


# argparse names the type in its message for a value int() cannot read ("invalid int value").
parse_port.__name__ = "int"
