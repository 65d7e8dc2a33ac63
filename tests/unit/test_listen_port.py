"""The port check that runs before vLLM is imported."""

from __future__ import annotations

import socket

import pytest

from server.listen_port import PortUnavailable, require_port_free
from server.options import ServerOptions, parse_server_flags


def options(port: int, host: str = "127.0.0.1") -> ServerOptions:
    return ServerOptions.from_args(parse_server_flags("python -m server", ["--host", host, "--port", str(port)]))


def test_a_bound_port_is_refused_and_a_free_one_accepted() -> None:
    with socket.socket() as occupant:
        occupant.bind(("127.0.0.1", 0))
        occupant.listen()
        port = occupant.getsockname()[1]
        with pytest.raises(PortUnavailable, match=f"127.0.0.1:{port} is already in use by another process"):
            require_port_free(options(port))
    require_port_free(options(port))


def test_an_address_that_cannot_be_listened_on_is_named() -> None:
    with pytest.raises(PortUnavailable, match=r"cannot listen on 192\.0\.2\.1:50051: "):
        require_port_free(options(50051, host="192.0.2.1"))  # TEST-NET-1: no local interface has it
