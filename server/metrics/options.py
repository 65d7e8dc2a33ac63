"""The metrics endpoint's flags (imports no engine: the CLI parses flags before vLLM loads)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from server.core.dataclass_flags import add_flags, flag, flag_values, flags_of
from server.core.net_address import listen_address

MAX_PORT = 65535


def parse_port(text: str) -> int:
    value = int(text)
    if not 1 <= value <= MAX_PORT:
        raise argparse.ArgumentTypeError(f"must be a port number from 1 to {MAX_PORT}, got {text!r}")
    return value


# argparse names the type in its message for a value int() cannot read ("invalid int value").
parse_port.__name__ = "int"


@dataclass(frozen=True)
class MetricsOptions:
    # Given: --metrics-host, or the server's --host without it (metrics_options_from).
    host: str = flag(
        "--metrics-host",
        metavar="HOST",
        help="address the metrics endpoint listens on, with --metrics-port (default: the server's --host)",
        field_required=True,
    )
    port: int = flag(
        "--metrics-port",
        parse=parse_port,
        metavar="PORT",
        help="serve Prometheus metrics at http://HOST:PORT/metrics: vLLM's engine metrics, per-RPC metrics and PoC "
        "rounds (default: no metrics endpoint)",
        field_required=True,
    )

    @property
    def address(self) -> str:
        return listen_address(self.host, self.port)


def add_metrics_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("metrics", "Prometheus metrics over HTTP (off unless --metrics-port is given)")
    flags = flags_of(MetricsOptions)
    # The flag that turns the endpoint on comes first.
    add_flags(group, [flags["port"], flags["host"]])


def metrics_options_from(namespace: argparse.Namespace) -> MetricsOptions | None:
    """None without --metrics-port: no endpoint, and no metrics are recorded at all."""
    given = flag_values(MetricsOptions, namespace)
    if given["port"] is None:
        return None
    return MetricsOptions(host=given["host"] or namespace.host, port=given["port"])
