"""Are the server's addresses free to listen on? Asked before the engine (and vLLM) is loaded."""

from __future__ import annotations

import errno
import socket
from dataclasses import dataclass

from server.options import ServerOptions


class PortUnavailable(RuntimeError):
    pass


@dataclass(frozen=True)
class _Listener:
    flag: str
    # How a refusal names it: "the gRPC port".
    name: str
    host: str
    port: int
    address: str


def require_port_free(options: ServerOptions) -> None:
    """Fails in a fraction of a second instead of after vLLM's import and the engine's start: each address the
    flags ask the server to listen on (the gRPC port; the metrics endpoint, the management API, the pull stream and
    the inference port where given) is a port of its own, and free."""
    listeners = _listeners(options)
    for index, listener in enumerate(listeners):
        for earlier in listeners[:index]:
            if listener.port == earlier.port:
                raise PortUnavailable(
                    f"{listener.flag} {listener.port} is {earlier.name} ({earlier.flag}): give it a port of its own"
                )
        _require_free(listener.host, listener.port, listener.address)


def _listeners(options: ServerOptions) -> list[_Listener]:
    listeners = [_Listener("--port", "the gRPC port", options.host, options.port, options.address)]
    metrics = options.metrics
    if metrics is not None:
        listeners.append(_Listener("--metrics-port", "the metrics port", metrics.host, metrics.port, metrics.address))
    http = options.http
    if http is not None:
        listeners.append(_Listener("--http-port", "the management port", http.host, http.port, http.address))
        stream_address = http.callback_stream_address
        if http.callback_stream_port is not None and stream_address is not None:
            listeners.append(
                _Listener(
                    "--callback-stream-port",
                    "the pull stream's port",
                    http.callback_stream_host,
                    http.callback_stream_port,
                    stream_address,
                )
            )
    inference = options.inference
    if inference is not None:
        listeners.append(
            _Listener("--inference-port", "the inference port", inference.host, inference.port, inference.address)
        )
    return listeners


def _require_free(host: str, port: int, address: str) -> None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        # Like gRPC's own listener: a TIME_WAIT leftover is fine, a live listener is not.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                raise PortUnavailable(f"{address} is already in use by another process") from error
            raise PortUnavailable(f"cannot listen on {address}: {error.strerror}") from error
