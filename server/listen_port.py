"""Are the server's addresses free to listen on? Asked before the engine (and vLLM) is loaded."""

from __future__ import annotations

import errno
import socket

from server.options import ServerOptions


class PortUnavailable(RuntimeError):
    pass


def require_port_free(options: ServerOptions) -> None:
    """Fails in a fraction of a second instead of after vLLM's import and the engine's start: the
    gRPC address, the metrics endpoint's when --metrics-port is given, the management API's when --http-port is,
    the pull stream's when --callback-stream-port is too, the inference port's when --inference-port is."""
    _require_free(options.host, options.port, options.address)
    metrics = options.metrics
    if metrics is not None:
        if metrics.port == options.port:
            raise PortUnavailable(f"--metrics-port {metrics.port} is the gRPC port (--port): give it a port of its own")
        _require_free(metrics.host, metrics.port, metrics.address)
    http = options.http
    if http is not None:
        if http.port == options.port:
            raise PortUnavailable(f"--http-port {http.port} is the gRPC port (--port): give it a port of its own")
        if metrics is not None and http.port == metrics.port:
            raise PortUnavailable(f"--http-port {http.port} is the metrics port (--metrics-port): give it its own")
        _require_free(http.host, http.port, http.address)
        stream_address = http.callback_stream_address
        if http.callback_stream_port is not None and stream_address is not None:
            taken = {options.port: "--port", http.port: "--http-port"}
            if metrics is not None:
                taken[metrics.port] = "--metrics-port"
            if http.callback_stream_port in taken:
                raise PortUnavailable(
                    f"--callback-stream-port {http.callback_stream_port} is the {taken[http.callback_stream_port]} "
                    "port: give it a port of its own"
                )
            _require_free(http.callback_stream_host, http.callback_stream_port, stream_address)
    inference = options.inference
    if inference is not None:
        taken = {options.port: "the gRPC port (--port)"}
        if metrics is not None:
            taken[metrics.port] = "the metrics port (--metrics-port)"
        if http is not None:
            taken[http.port] = "the management port (--http-port)"
        if inference.port in taken:
            raise PortUnavailable(f"--inference-port {inference.port} is {taken[inference.port]}: give it its own")
        _require_free(inference.host, inference.port, inference.address)


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
