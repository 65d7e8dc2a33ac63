"""The server's own command-line flags (vLLM's engine flags sit beside them).

Importing this module imports no engine: `python -m server` parses these flags and checks the
port before vLLM is imported, which alone takes about 10 seconds.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

SERVER_GROUP = "server"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 50051
DEFAULT_SHUTDOWN_GRACE_SECONDS = 5.0
DEFAULT_MAX_REQUEST_MIB = 16
DEFAULT_ENGINE_CALL_TIMEOUT_SECONDS = 30.0
DEFAULT_ENGINE_STUCK_SECONDS = 120.0
# The network's executors report processed logprobs (inference-validation.md 2).
LOGPROBS_MODES = ("processed", "raw")
DEFAULT_LOGPROBS_MODE = "processed"
MIB = 1024 * 1024

N = TypeVar("N", int, float)


@dataclass(frozen=True)
class ServerOptions:
    host: str
    port: int
    # In-flight streams get this long to finish after SIGTERM/SIGINT before they are aborted.
    shutdown_grace_seconds: float
    # gRPC's maximum receive message size.
    max_request_bytes: int
    # None: resolved from the model's context once the model is known.
    max_prompt_chars: int | None
    # An RPC waits this long on a call into the engine (status, reports) before DEADLINE_EXCEEDED.
    engine_call_timeout_seconds: float
    # A call into the engine unanswered after this long turns health NOT_SERVING.
    engine_stuck_seconds: float
    # For requests that state no logprobs mode: "processed" or "raw".
    default_logprobs_mode: str = DEFAULT_LOGPROBS_MODE

    @property
    def address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> "ServerOptions":
        return cls(
            host=args.host,
            port=args.port,
            shutdown_grace_seconds=args.shutdown_grace,
            max_request_bytes=args.max_request_mb * MIB,
            max_prompt_chars=args.max_prompt_chars,
            engine_call_timeout_seconds=args.engine_call_timeout,
            engine_stuck_seconds=args.engine_stuck_after,
            default_logprobs_mode=args.default_logprobs_mode,
        )


def add_server_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(SERVER_GROUP, "The gRPC server (all other flags are vLLM's engine arguments)")
    group.add_argument("--host", default=DEFAULT_HOST, help="address to listen on (default: %(default)s)")
    group.add_argument("--port", type=int, default=DEFAULT_PORT, help="port to listen on (default: %(default)s)")
    group.add_argument(
        "--shutdown-grace",
        type=float,
        default=DEFAULT_SHUTDOWN_GRACE_SECONDS,
        metavar="SECONDS",
        help="on SIGTERM/SIGINT, how long in-flight streams may run before they are aborted (default: %(default)s)",
    )
    group.add_argument(
        "--max-request-mb",
        type=_positive(int),
        default=DEFAULT_MAX_REQUEST_MIB,
        metavar="MIB",
        help="largest request message accepted, in MiB; larger ones get RESOURCE_EXHAUSTED (default: %(default)s)",
    )
    group.add_argument(
        "--max-prompt-chars",
        type=_positive(int),
        default=None,
        metavar="CHARS",
        help="longest text prompt accepted, in characters (default: %(default)s, which is 16 characters per token "
        "of the model's context)",
    )
    group.add_argument(
        "--engine-call-timeout",
        type=_positive(float),
        default=DEFAULT_ENGINE_CALL_TIMEOUT_SECONDS,
        metavar="SECONDS",
        help="how long an RPC waits on a call into the engine (status, reports) before DEADLINE_EXCEEDED, in seconds "
        "(default: %(default)s)",
    )
    group.add_argument(
        "--engine-stuck-after",
        type=_positive(float),
        default=DEFAULT_ENGINE_STUCK_SECONDS,
        metavar="SECONDS",
        help="a call into the engine still unanswered after this many seconds turns health NOT_SERVING "
        "(default: %(default)s)",
    )
    group.add_argument(
        "--default-logprobs-mode",
        choices=LOGPROBS_MODES,
        default=DEFAULT_LOGPROBS_MODE,
        help="how logprobs are computed for requests that state no mode: processed (after penalties, temperature "
        "and top-k/top-p, as the network reports them) or raw (the model's own distribution) (default: %(default)s)",
    )


def parse_server_flags(prog: str, argv: list[str]) -> argparse.Namespace:
    """The server's flags alone; every other argument is left for vLLM's parser.

    Exact flag names only (no abbreviations), so that no vLLM flag is taken for one of ours.
    A bad value exits with code 2 and argparse's message, as the full parser would.
    """
    parser = argparse.ArgumentParser(prog=prog, add_help=False, allow_abbrev=False)
    add_server_arguments(parser)
    return parser.parse_known_args(argv)[0]


def server_help(prog: str) -> str:
    """The server group's help, as `--help=server` prints it."""
    parser = argparse.ArgumentParser(prog=prog, usage=argparse.SUPPRESS, add_help=False)
    add_server_arguments(parser)
    return parser.format_help()


def _positive(number: Callable[[str], N]) -> Callable[[str], N]:
    def parse(text: str) -> N:
        value = number(text)
        if not value > 0:  # also refuses NaN
            raise argparse.ArgumentTypeError(f"must be positive, got {text!r}")
        return value

    # argparse names the type in its message for a value `number` cannot read ("invalid int value").
    parse.__name__ = number.__name__
    return parse
