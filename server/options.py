"""The server's own command-line flags (vLLM's engine flags sit beside them).

Importing this module imports no engine: `python -m server` parses these flags and checks the
port before vLLM is imported, which alone takes about 10 seconds.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from engine_ext.hang_watch import DEFAULT_FROZEN_CHECKS, DEFAULT_HANG_GRACE_SECONDS
from server.core.dataclass_flags import add_flags, flag, flags_of, non_negative, options_from, positive
from server.core.net_address import listen_address
from server.http.options import (
    HttpOptions,
    InferencePortOptions,
    add_http_arguments,
    http_options_from,
    inference_port_options_from,
)
from server.metrics.options import MetricsOptions, add_metrics_arguments, metrics_options_from
from server.poc.options import PocOptions, add_poc_arguments, default_callback_store

SERVER_GROUP = "server"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 50051
DEFAULT_SHUTDOWN_GRACE_SECONDS = 5.0
DEFAULT_MAX_REQUEST_MIB = 16
DEFAULT_ENGINE_CALL_TIMEOUT_SECONDS = 30.0
DEFAULT_ENGINE_STUCK_SECONDS = 120.0
# The network's executors report processed logprobs (inference-validation.md 2).
# engine_ext.consensus.logprobs_mode.LogprobsMode's members, lower-cased (that package loads torch: parsing stays light).
LOGPROBS_MODES = ("processed", "raw")
DEFAULT_LOGPROBS_MODE = "processed"
MIB = 1024 * 1024
# Far above what one engine serves at once (vLLM batches 128-1024 sequences), low enough that a
# flood of streams is refused before it costs tokenization and memory.
DEFAULT_MAX_CONCURRENT_STREAMS = 1024
# The server pings an idle connection this often and drops it when a ping goes unanswered this long.
DEFAULT_KEEPALIVE_TIME_SECONDS = 30.0
DEFAULT_KEEPALIVE_TIMEOUT_SECONDS = 10.0
# Clients may ping at most this often while the server sends nothing; more often earns a GOAWAY.
DEFAULT_KEEPALIVE_MIN_PING_INTERVAL_SECONDS = 10.0
# --instances: as many as the host's accelerators hold (1 on a CPU).
AUTO_INSTANCES = "auto"
# The environment variable that may hold the control RPCs' bearer token (server and clients alike).
AUTH_TOKEN_ENV = "MLNODE_AUTH_TOKEN"


def _instance_count(text: str) -> int | None:
    if text == AUTO_INSTANCES:
        return None
    try:
        count = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive number or {AUTO_INSTANCES!r}, got {text!r}") from None
    if count < 1:
        raise argparse.ArgumentTypeError(f"must be a positive number or {AUTO_INSTANCES!r}, got {text!r}")
    return count


def _mib_to_bytes(mib: int) -> int:
    return mib * MIB


@dataclass(frozen=True)
class ServerOptions:
    """The server's options; each field's flag is declared on it, in the order `--help=server` lists them."""

    host: str = flag("--host", default=DEFAULT_HOST, help="address to listen on (default: %(default)s)")
    port: int = flag("--port", parse=int, default=DEFAULT_PORT, help="port to listen on (default: %(default)s)")
    # In-flight streams get this long to finish after SIGTERM/SIGINT before they are aborted.
    shutdown_grace_seconds: float = flag(
        "--shutdown-grace",
        parse=float,
        default=DEFAULT_SHUTDOWN_GRACE_SECONDS,
        metavar="SECONDS",
        help="on SIGTERM/SIGINT, how long in-flight streams may run before they are aborted (default: %(default)s)",
    )
    # gRPC's maximum receive message size.
    max_request_bytes: int = flag(
        "--max-request-mb",
        parse=positive(int),
        default=DEFAULT_MAX_REQUEST_MIB,
        to_field=_mib_to_bytes,
        metavar="MIB",
        help="largest request message accepted, in MiB; larger ones get RESOURCE_EXHAUSTED (default: %(default)s)",
    )
    # None: resolved from the model's context once the model is known.
    max_prompt_chars: int | None = flag(
        "--max-prompt-chars",
        parse=positive(int),
        metavar="CHARS",
        help="longest text prompt accepted, in characters (default: %(default)s, which is 16 characters per token "
        "of the model's context)",
    )
    # An RPC waits this long on a call into the engine (status, reports) before DEADLINE_EXCEEDED.
    engine_call_timeout_seconds: float = flag(
        "--engine-call-timeout",
        parse=positive(float),
        default=DEFAULT_ENGINE_CALL_TIMEOUT_SECONDS,
        metavar="SECONDS",
        help="how long an RPC waits on a call into the engine (status, reports) before DEADLINE_EXCEEDED, in seconds "
        "(default: %(default)s)",
    )
    # A call into the engine unanswered after this long turns health NOT_SERVING.
    engine_stuck_seconds: float = flag(
        "--engine-stuck-after",
        parse=positive(float),
        default=DEFAULT_ENGINE_STUCK_SECONDS,
        metavar="SECONDS",
        help="a call into the engine still unanswered after this many seconds turns health NOT_SERVING; a PoC batch "
        "(engine work, whose first run at a shape may compile kernels) is waited on this long (default: %(default)s)",
    )
    # No step progress this long while requests wait (DEFAULT_FROZEN_CHECKS checks in a row) does too.
    engine_hang_grace_seconds: float = flag(
        "--engine-hang-grace",
        parse=positive(float),
        default=DEFAULT_HANG_GRACE_SECONDS,
        metavar="SECONDS",
        help="an engine that makes no step progress for this many seconds while requests wait on it (checked "
        f"twice a second, {DEFAULT_FROZEN_CHECKS} such checks in a row) turns health NOT_SERVING and /livez 503 "
        "until it steps again; the deployed node's MLNODE_HANG_GRACE_SEC (default: %(default)s)",
    )
    # For requests that state no logprobs mode: "processed" or "raw".
    default_logprobs_mode: str = flag(
        "--default-logprobs-mode",
        choices=LOGPROBS_MODES,
        default=DEFAULT_LOGPROBS_MODE,
        help="how logprobs are computed for requests that state no mode: processed (after penalties, temperature "
        "and top-k/top-p, as the network reports them) or raw (the model's own distribution) (default: %(default)s)",
    )
    # Engine instances (nonce groups) under this server; None: as many as the visible accelerators hold.
    instances: int | None = flag(
        "--instances",
        parse=_instance_count,
        default=1,
        metavar="N|auto",
        help="engine instances under this one server, each on its own slice of the host's devices (GPUs i*g..i*g+g-1 "
        "of those visible, g = tensor x pipeline parallel size; on a CPU, its own cores) and each one nonce group of "
        "the node's PoC rounds; inference goes to the least-loaded instance. auto: visible accelerators / (tensor x "
        "pipeline parallel size), 1 on a CPU (default: %(default)s)",
    )
    # The server exits with code 1 once fewer instances than this have a living engine.
    min_instances: int = flag(
        "--min-instances",
        parse=positive(int),
        default=1,
        metavar="N",
        help="the server exits with code 1 once fewer instances than this have a living engine (a dead instance is "
        "not restarted: its health name and GetServerStatus report it) (default: %(default)s)",
    )
    # PEM files (server.credentials reads them). A client CA makes client certificates required.
    tls_cert_file: str | None = flag(
        "--tls-cert", metavar="PEM", help="serve TLS with this certificate chain (needs --tls-key)"
    )
    tls_key_file: str | None = flag(
        "--tls-key", metavar="PEM", help="the TLS certificate's private key (needs --tls-cert)"
    )
    tls_client_ca_file: str | None = flag(
        "--tls-client-ca",
        metavar="PEM",
        help="require client certificates signed by these CAs (mutual TLS; needs --tls-cert and --tls-key)",
    )
    # The control RPCs' bearer token is read from this file (or AUTH_TOKEN_ENV), never from a flag
    # (--auth-token is refused: add_server_arguments).
    auth_token_file: str | None = flag(
        "--auth-token-file",
        metavar="PATH",
        help="require `authorization: Bearer <token>` on the control RPCs (Abort, GetServerStatus with engine "
        "processes, ValidationService, PocService), the token being this file's content; or set "
        f"{AUTH_TOKEN_ENV}. A token on the command line is refused: every user of the machine can read it",
    )
    # Inference streams (Generate, ValidateInference) served at once; 0: no bound.
    max_concurrent_streams: int = flag(
        "--max-concurrent-streams",
        parse=non_negative(int),
        default=DEFAULT_MAX_CONCURRENT_STREAMS,
        metavar="N",
        help="inference streams (Generate, ValidateInference) served at once; more get RESOURCE_EXHAUSTED "
        "(TOO_MANY_STREAMS) before the engine sees them; 0: no bound (default: %(default)s)",
    )
    keepalive_time_seconds: float = flag(
        "--keepalive-time",
        parse=positive(float),
        default=DEFAULT_KEEPALIVE_TIME_SECONDS,
        metavar="SECONDS",
        help="the server pings each connection this often to detect dead peers, quiet streams included "
        "(default: %(default)s)",
    )
    keepalive_timeout_seconds: float = flag(
        "--keepalive-timeout",
        parse=positive(float),
        default=DEFAULT_KEEPALIVE_TIMEOUT_SECONDS,
        metavar="SECONDS",
        help="a connection whose ping goes unanswered this long is closed (default: %(default)s)",
    )
    keepalive_min_ping_interval_seconds: float = flag(
        "--keepalive-min-ping-interval",
        parse=positive(float),
        default=DEFAULT_KEEPALIVE_MIN_PING_INTERVAL_SECONDS,
        metavar="SECONDS",
        help="clients may ping at most this often while the server sends nothing; a client that pings more often "
        "gets GOAWAY (too_many_pings) (default: %(default)s)",
    )
    poc: PocOptions = PocOptions()
    # None: no metrics endpoint (--metrics-port not given); nothing recorded unless --http-port serves them.
    metrics: MetricsOptions | None = None
    # None: no HTTP management API (--http-port not given).
    http: HttpOptions | None = None
    # None: no OpenAI-style inference port (--inference-port not given).
    inference: InferencePortOptions | None = None

    @property
    def callback_store(self) -> Path:
        """The durable callback store's file: --callback-store, or the default for this server's port."""
        return Path(self.poc.callback_store) if self.poc.callback_store else default_callback_store(self.port)

    @property
    def records_metrics(self) -> bool:
        """Whether the server keeps Prometheus metrics: for the metrics port, and for the management API's
        /api/v1/metrics (the deployed node serves them unless turned off)."""
        return self.metrics is not None or self.http is not None

    @property
    def address(self) -> str:
        return listen_address(self.host, self.port)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ServerOptions:
        return options_from(
            cls,
            args,
            poc=options_from(PocOptions, args),
            metrics=metrics_options_from(args),
            http=http_options_from(args),
            inference=inference_port_options_from(args),
        )


def add_server_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(SERVER_GROUP, "The gRPC server (all other flags are vLLM's engine arguments)")
    add_flags(group, flags_of(ServerOptions).values())
    # Refused, not merely absent: an unknown flag would reach vLLM's parser, whose error message
    # would print the secret beside it.
    group.add_argument("--auth-token", action=_RefusedSecretFlag)
    add_poc_arguments(parser)
    add_metrics_arguments(parser)
    add_http_arguments(parser)


class _RefusedSecretFlag(argparse.Action):
    """`--auth-token[=VALUE]`: exits 2 with a message that never repeats the value."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs="?", default=argparse.SUPPRESS, help=argparse.SUPPRESS)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        parser.error(
            f"{option_string} is refused: a token on the command line is visible to every user of this machine; "
            f"name a file with --auth-token-file or set {AUTH_TOKEN_ENV}"
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
