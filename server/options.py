"""The server's own command-line flags (vLLM's engine flags sit beside them)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 50051
DEFAULT_SHUTDOWN_GRACE_SECONDS = 5.0


@dataclass(frozen=True)
class ServerOptions:
    host: str
    port: int
    # In-flight streams get this long to finish after SIGTERM/SIGINT before they are aborted.
    shutdown_grace_seconds: float

    @property
    def address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> "ServerOptions":
        return cls(host=args.host, port=args.port, shutdown_grace_seconds=args.shutdown_grace)


def add_server_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("server", "The gRPC server (all other flags are vLLM's engine arguments)")
    group.add_argument("--host", default=DEFAULT_HOST, help="address to listen on (default: %(default)s)")
    group.add_argument("--port", type=int, default=DEFAULT_PORT, help="port to listen on (default: %(default)s)")
    group.add_argument(
        "--shutdown-grace",
        type=float,
        default=DEFAULT_SHUTDOWN_GRACE_SECONDS,
        metavar="SECONDS",
        help="on SIGTERM/SIGINT, how long in-flight streams may run before they are aborted (default: %(default)s)",
    )
