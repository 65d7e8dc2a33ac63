"""`mlnode-client` / `python -m gonka.mlnode.client`: every RPC from the command line.

    mlnode-client chat "Why is the sky blue?" --max-tokens 64
    mlnode-client complete "Once upon a time" --logprobs 5
    mlnode-client complete "Once upon a time" --logprobs 5 --logprobs-mode processed --record | mlnode-client validate-inference --threshold 0.94
    mlnode-client info | status | abort REQUEST_ID
    mlnode-client round start --block-hash H --public-key K --seq-len 1024 | round stop | round status
    mlnode-client subscribe --json > artifacts.jsonl
    mlnode-client compute --block-hash H --public-key K --seq-len 1024 0..99
    mlnode-client validate-poc claims.json --block-hash H --public-key K --seq-len 1024 --dist-threshold 0.2 --p-mismatch 0.1 --p-value-threshold 0.05
    mlnode-client --target node:50051 --tls-ca ca.pem --tls-cert me.pem --tls-key me.key --auth-token-file token status

Every command takes --json: machine-readable output on stdout (proto JSON for the RPCs' messages).
The token (for the control RPCs: abort, status, validate-inference and every PoC command) comes from
--auth-token-file or $MLNODE_AUTH_TOKEN. Exit status: 0 on success, 1 when a call fails (the error
on stderr) or the command's own test fails, 2 for a usage error.
"""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

from gonka.mlnode.client.cli_io import add_output_flags, print_message
from gonka.mlnode.client.client import DEFAULT_TARGET, InferenceClient
from gonka.mlnode.client.connection import AUTH_TOKEN_ENV, TlsConfig, auth_token_from
from gonka.mlnode.client.errors import ServerError
from gonka.mlnode.client.generation_commands import (
    GENERATION_COMMANDS,
    add_generation_commands,
    generation_usage_error,
    run_generation,
)
from gonka.mlnode.client.poc_arguments import POC_COMMANDS, add_poc_commands
from gonka.mlnode.client.poc_commands import run_poc_command
from gonka.mlnode.client.validate_inference_command import add_validate_inference_command, run_validate_inference


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mlnode-client", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--target", default=DEFAULT_TARGET, help="server address (default: %(default)s)")
    parser.add_argument("--timeout", type=float, default=None, help="deadline in seconds")
    security = parser.add_argument_group("TLS and authorization")
    security.add_argument(
        "--tls",
        action="store_true",
        help="connect over TLS, trusting the system's CAs (implied by the other --tls-* flags)",
    )
    security.add_argument("--tls-ca", metavar="PEM", help="trust this CA for the server's certificate")
    security.add_argument(
        "--tls-cert", metavar="PEM", help="this client's certificate, for mutual TLS (needs --tls-key)"
    )
    security.add_argument("--tls-key", metavar="PEM", help="the client certificate's private key")
    security.add_argument(
        "--tls-server-name",
        metavar="NAME",
        help="the name the server's certificate must carry, if not the target's host",
    )
    security.add_argument(
        "--auth-token-file",
        metavar="PATH",
        help=f"send the token in this file as a bearer token (default: ${AUTH_TOKEN_ENV}, if set)",
    )
    commands = parser.add_subparsers(dest="command", required=True)

    add_generation_commands(commands)
    add_output_flags(commands.add_parser("info", help="model information"), progress=False)
    add_output_flags(commands.add_parser("status", help="server and engine status"), progress=False)
    abort = commands.add_parser("abort", help="abort an active request")
    abort.add_argument("request_id")
    add_output_flags(abort, progress=False)
    add_validate_inference_command(commands)
    add_poc_commands(commands)
    return parser


def main(argv: list[str] | None = None, out: TextIO = sys.stdout) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if (args.tls_cert is None) != (args.tls_key is None):
        parser.error("--tls-cert and --tls-key go together")
    if args.command in GENERATION_COMMANDS and (problem := generation_usage_error(args)):
        parser.error(problem)
    try:
        tls = _tls_config(args)
        token = auth_token_from(args.auth_token_file)
    except OSError as error:
        parser.error(f"cannot read {error.filename}: {error.strerror}")
    try:
        with InferenceClient(args.target, tls=tls, auth_token=token) as client:
            return _run(client, args, out)
    except ServerError as error:
        where = f" (field {error.field})" if error.field else ""
        print(f"error: {error.code.name} {error.reason or ''}{where}: {error.message}", file=sys.stderr)
        return 1


def _run(client: InferenceClient, args: argparse.Namespace, out: TextIO) -> int:
    """The command's exit status; a failed call raises ServerError."""
    if args.command == "info":
        print_message(client.model_info(), args.json, out)
    elif args.command == "status":
        print_message(client.server_status(include_engine_processes=True), args.json, out)
    elif args.command == "abort":
        response = client.abort(args.request_id)
        if args.json:
            print_message(response, True, out)
    elif args.command == "validate-inference":
        return run_validate_inference(client, args, out, sys.stderr)
    elif args.command in POC_COMMANDS:
        return run_poc_command(client, args, out, sys.stderr)
    else:
        return run_generation(client, args, out)
    return 0


def _tls_config(args: argparse.Namespace) -> TlsConfig | None:
    if not (args.tls or args.tls_ca or args.tls_cert or args.tls_server_name):
        return None
    return TlsConfig.from_files(args.tls_ca, args.tls_cert, args.tls_key, args.tls_server_name)
