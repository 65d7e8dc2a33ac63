"""The management API's flags (imports no engine and no web framework: the CLI parses flags before vLLM loads)."""

from __future__ import annotations

import argparse
import enum
from dataclasses import dataclass

from server.core.dataclass_flags import add_flags, flag, flag_values, flags_of
from server.core.net_address import listen_address
from server.metrics.options import parse_port

# The MLNode release whose API this server answers as: the API node gates features on it (the pull callback
# stream from 3.0.14 on, spec section 6).
DEFAULT_MLNODE_VERSION = "3.1.0"
# The pull stream's own port, where it has one, is plaintext: loopback unless the host says otherwise.
DEFAULT_CALLBACK_STREAM_HOST = "127.0.0.1"


class FraudThreshold(enum.Enum):
    """Which p-value threshold decides fraud (--fraud-threshold)."""

    # The deployed node's 0.01: validators agree with the fleet's.
    FLEET = "fleet"
    # The API node's stat_test.p_value_threshold.
    CALLER = "caller"


def _semver(text: str) -> str:
    # The API node compares it as MAJOR.MINOR.PATCH (a pre-release suffix allowed).
    core = text.removeprefix("v").split("-", 1)[0]
    parts = core.split(".")
    if len(parts) != 3 or not all(part.isdigit() for part in parts):
        raise argparse.ArgumentTypeError(f"must be a version MAJOR.MINOR.PATCH, got {text!r}")
    return text


@dataclass(frozen=True)
class HttpOptions:
    # The management API listens on the gRPC server's --host.
    host: str
    port: int = flag(
        "--http-port",
        parse=parse_port,
        metavar="PORT",
        help="serve the management API (/api/v1/state, stop, inference/up, health, ...) over plain HTTP on the "
        "server's --host at this port, beside the gRPC server and on the same engine (default: no HTTP API)",
        field_required=True,
    )
    mlnode_version: str = flag(
        "--mlnode-version",
        default=DEFAULT_MLNODE_VERSION,
        parse=_semver,
        metavar="SEMVER",
        help="the MLNode release `/api/v1/state` reports as `version`; the API node gates features on it "
        "(default: %(default)s)",
    )
    fraud_threshold: FraudThreshold = flag(
        "--fraud-threshold",
        choices=[threshold.value for threshold in FraudThreshold],
        default=FraudThreshold.FLEET.value,
        to_field=FraudThreshold,
        help="the p-value below which an HTTP validation job judges fraud: fleet, 0.01 whatever the API node sends, "
        "as the deployed ML node decides; caller, the API node's p_value_threshold (default: %(default)s)",
    )
    # The pull stream's own plaintext port; None: the gRPC port serves it, where it can.
    callback_stream_port: int | None = flag(
        "--callback-stream-port",
        parse=parse_port,
        metavar="PORT",
        help="with --http-port: serve the API node's pull stream mlnode.poc.v1.PoCCallbackStream (the callbacks of "
        "rounds it gives no url) in plaintext on this port of --callback-stream-host (default: on the gRPC port when "
        "that runs without TLS and without a token; not served otherwise)",
    )
    callback_stream_host: str = flag(
        "--callback-stream-host",
        default=DEFAULT_CALLBACK_STREAM_HOST,
        metavar="HOST",
        help="address the pull stream listens on, with --callback-stream-port (default: %(default)s)",
    )

    @property
    def address(self) -> str:
        return listen_address(self.host, self.port)

    @property
    def callback_stream_address(self) -> str | None:
        if self.callback_stream_port is None:
            return None
        return listen_address(self.callback_stream_host, self.callback_stream_port)


@dataclass(frozen=True)
class InferencePortOptions:
    """The OpenAI-style inference port, on the gRPC server's --host."""

    host: str
    port: int = flag(
        "--inference-port",
        parse=parse_port,
        metavar="PORT",
        help="serve the OpenAI-style inference API (/v1/chat/completions, /v1/completions, /v1/models, /tokenize, "
        "/health) over plain HTTP on the server's --host at this port, on the same engine and PoC gate as the gRPC "
        "InferenceService (default: none; the management port serves /v1/* too)",
        field_required=True,
    )

    @property
    def address(self) -> str:
        return listen_address(self.host, self.port)


def add_http_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "http",
        "The ML node's HTTP management API, as the network's API node calls it (off unless --http-port is given)",
    )
    http_port, *http_settings = flags_of(HttpOptions).values()
    # The two ports that turn a listener on come first.
    add_flags(group, [http_port, *flags_of(InferencePortOptions).values(), *http_settings])


def http_options_from(namespace: argparse.Namespace) -> HttpOptions | None:
    """None without --http-port: no management API."""
    given = flag_values(HttpOptions, namespace)
    if given["port"] is None:
        return None
    return HttpOptions(host=namespace.host, **given)


def inference_port_options_from(namespace: argparse.Namespace) -> InferencePortOptions | None:
    """None without --inference-port."""
    given = flag_values(InferencePortOptions, namespace)
    if given["port"] is None:
        return None
    return InferencePortOptions(host=namespace.host, **given)
