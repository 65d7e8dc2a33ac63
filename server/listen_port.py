"""Is the server's address free to listen on? Asked before the engine (and vLLM) is loaded."""

from __future__ import annotations

import errno
import socket

from server.options import ServerOptions


class PortUnavailable(RuntimeError):
    pass


def require_port_free(options: ServerOptions) -> None:
    """Fails in a fraction of a second instead of after vLLM's import and the engine's start."""
    family = socket.AF_INET6 if ":" in options.host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        # Like gRPC's own listener: a TIME_WAIT leftover is fine, a live listener is not.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((options.host, options.port))
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                raise PortUnavailable(f"{options.address} is already in use by another process") from error
            raise PortUnavailable(f"cannot listen on {options.address}: {error.strerror}") from error
