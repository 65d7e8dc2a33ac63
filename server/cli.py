"""`python -m server`: the gRPC server's command line (server flags plus every vLLM engine argument).

Importing vLLM takes about 10 seconds, so the server's own flags are read, its port checked, its TLS files
and auth token read and its callback store claimed first, and `--help=server` is answered, before anything
imports it.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any

import uvloop

from server.credentials import CredentialsError, load_credentials
from server.embedded_model import DEFAULT_MODEL_DIR, ensure_embedded_model
from server.listen_port import PortUnavailable, require_port_free
from server.options import SERVER_GROUP, ServerOptions, add_server_arguments, parse_server_flags, server_help
from server.poc.delivery.store_lock import StoreInUse, StoreLock

PROG = "python -m server"
EMBEDDED_MODEL_NAME = "qwen3-tiny-embedded"
EMBEDDED_MODEL_HELP = "model directory or hub id (default: the embedded tiny Qwen3)"
DESCRIPTION = (
    "gRPC inference-and-proof server for Gonka ML nodes on vLLM. Without --model it serves the embedded "
    f"tiny Qwen3 (built on first use into {DEFAULT_MODEL_DIR}). Engine flags are vLLM's own, as "
    "`vllm serve` accepts them."
)
# vLLM's parser's spellings: `--help=<group>` (any case) shows one group.
HELP_FLAGS = ("-h", "--help")
GROUP_HELP_PREFIX = "--help="
EXIT_REFUSED = 2


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(asctime)s [%(name)s] %(message)s")
    if f"{GROUP_HELP_PREFIX}{SERVER_GROUP}" in (arg.lower() for arg in argv):
        print(server_help(PROG), end="")
        sys.exit(0)
    if _asks_for_help(argv):
        _engine_parser()[0].parse_args(argv)  # vLLM's parser prints the help asked for and exits
    options = ServerOptions.from_args(parse_server_flags(PROG, argv))
    try:
        require_port_free(options)
        load_credentials(options, os.environ)
        store_lock = StoreLock.claim(options.callback_store)
    except (PortUnavailable, CredentialsError, StoreInUse, OSError) as error:
        sys.exit(_refused(error))
    try:
        sys.exit(_serve(argv, store_lock))
    finally:
        store_lock.release()


def _engine_parser() -> tuple[argparse.ArgumentParser, Any]:
    """vLLM's parser with the server's flags, and the embedded model (a DefaultModel) it defaults to."""
    # Imported only now: it imports vLLM.
    from engine_ext.engine_args import DefaultModel, build_engine_parser

    embedded = DefaultModel(EMBEDDED_MODEL_NAME, EMBEDDED_MODEL_HELP, ensure_embedded_model)
    return build_engine_parser(PROG, DESCRIPTION, add_server_arguments, embedded), embedded


def _serve(argv: list[str], store_lock: StoreLock) -> int:
    # Imported only now: both import vLLM.
    from engine_ext.engine_args import engine_args_from
    from server.app import StartupError, serve

    parser, embedded = _engine_parser()
    namespace = parser.parse_args(argv)
    options = ServerOptions.from_args(namespace)
    try:
        # Again, on what vLLM's parser read: a --config file, or a flag spelled with underscores,
        # can name an address or a file the first look did not see.
        require_port_free(options)
        credentials = load_credentials(options, os.environ)
        if store_lock.store_path != options.callback_store:
            store_lock.release()
            store_lock = StoreLock.claim(options.callback_store)
        # uvloop, as vLLM's own servers use: about a tenth less API-process CPU per streamed token.
        return uvloop.run(serve(options, credentials, engine_args_from(namespace, embedded), store_lock))
    except (PortUnavailable, CredentialsError, StoreInUse, StartupError) as error:
        return _refused(error)


def _asks_for_help(argv: list[str]) -> bool:
    return any(arg in HELP_FLAGS or arg.startswith(GROUP_HELP_PREFIX) for arg in argv)


def _refused(error: Exception) -> int:
    print(f"error: {error}", file=sys.stderr)
    return EXIT_REFUSED
