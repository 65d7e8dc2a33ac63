"""The metrics endpoint is off unless --metrics-port is given; its address and its port check."""

from __future__ import annotations

import socket

import pytest

from server.listen_port import PortUnavailable, require_port_free
from server.metrics.options import MetricsOptions
from server.options import ServerOptions, parse_server_flags


def options(*argv: str) -> ServerOptions:
    return ServerOptions.from_args(parse_server_flags("python -m server", list(argv)))


def test_no_endpoint_without_the_flag() -> None:
    # server.app builds no ServerMetrics (no listener, no interceptor, no request metrics) for None.
    assert options().metrics is None
    assert options("--metrics-host", "0.0.0.0").metrics is None


def test_the_endpoint_listens_on_the_servers_host_unless_told_otherwise() -> None:
    assert options("--host", "10.1.2.3", "--metrics-port", "9400").metrics == MetricsOptions("10.1.2.3", 9400)
    assert options("--metrics-port", "9400", "--metrics-host", "::1").metrics.address == "[::1]:9400"


@pytest.mark.parametrize("port", ["0", "65536", "-1", "http"])
def test_a_bad_port_exits_2(port: str) -> None:
    with pytest.raises(SystemExit) as refused:
        options("--metrics-port", port)
    assert refused.value.code == 2


def test_a_bound_metrics_port_or_the_grpc_port_is_refused_before_the_engine_loads() -> None:
    with socket.socket() as occupant:
        occupant.bind(("127.0.0.1", 0))
        occupant.listen()
        taken = occupant.getsockname()[1]
        with pytest.raises(PortUnavailable, match=f"127.0.0.1:{taken} is already in use"):
            require_port_free(options("--port", "0", "--metrics-port", str(taken)))
    with pytest.raises(PortUnavailable, match="is the gRPC port"):
        require_port_free(options("--port", "9400", "--metrics-port", "9400"))
