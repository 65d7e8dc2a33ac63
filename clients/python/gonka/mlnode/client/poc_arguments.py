"""The CLI's PoC commands and their arguments: `round start|stop|status`, `subscribe`, `compute`,
`validate-poc`. Values are checked here, while parsing, so a bad one is a usage error (exit 2)
before anything is sent."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from gonka.mlnode.client.artifacts import claims_from_json
from gonka.mlnode.client.cli_io import STDIN, add_output_flags, input_name, read_input
from gonka.mlnode.client.poc import DEFAULT_MAX_RETRIES

POC_COMMANDS = frozenset({"round", "subscribe", "compute", "validate-poc"})


def nonces_argument(text: str) -> list[int]:
    """One nonce (`17`, `-3`) or an inclusive range (`0..99`)."""
    start, dots, end = text.partition("..")
    try:
        if not dots:
            return [int(text)]
        first, last = int(start), int(end)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is neither a nonce nor a range FIRST..LAST") from None
    if last < first:
        raise argparse.ArgumentTypeError(f"range {text!r} ends before it starts")
    return list(range(first, last + 1))


def parse_claims(text: str) -> list[tuple[int, str]]:
    """The network's JSON list `[{"nonce": n, "vector_b64": "..."}]`, or the same objects one per
    line (what `subscribe --json` and `compute --json` print)."""
    try:
        document: Any = json.loads(text)
    except json.JSONDecodeError:
        try:
            document = [json.loads(line) for line in text.splitlines() if line.strip()]
        except json.JSONDecodeError as error:
            raise ValueError(f"neither a JSON list of claims nor JSON lines: {error}") from None
    if isinstance(document, dict):
        document = [document]
    if not isinstance(document, list):
        raise ValueError(f"expected a list of claims, got {type(document).__name__}")
    return claims_from_json(document)


def claims_argument(path: str) -> list[tuple[int, str]]:
    """Claims from the file at `path`, or from stdin for `-`."""
    try:
        return parse_claims(read_input(path))
    except OSError as error:
        raise argparse.ArgumentTypeError(f"cannot read {path}: {error.strerror}") from None
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"{input_name(path)}: {error}") from None


def _at_least(lowest: int) -> Callable[[str], int]:
    def check(text: str) -> int:
        value = int(text)
        if value < lowest:
            raise argparse.ArgumentTypeError(f"must be >= {lowest}, got {value}")
        return value

    return check


def _add_artifact_params(command: argparse.ArgumentParser) -> None:
    """What an artifact depends on besides its nonce; unset optionals keep the server's defaults."""
    command.add_argument("--block-hash", required=True)
    command.add_argument("--public-key", required=True)
    command.add_argument("--seq-len", type=int, required=True, help="tokens per nonce (the network runs 1024)")
    command.add_argument("--model", help="default: the served model (GetModelInfo)")
    command.add_argument("--k-dim", type=int, help="coordinates per artifact (server default: 12)")
    command.add_argument("--stronger-rng", action="store_true", help="the stronger input RNG (poc-v2.md section 3)")
    command.add_argument("--batch-size", type=int, help="nonces per forward (server default: 32)")


def add_poc_commands(commands: argparse._SubParsersAction) -> None:
    round_command = commands.add_parser("round", help="start, stop or inspect a PoC mining round")
    actions = round_command.add_subparsers(dest="round_action", required=True)
    start = actions.add_parser("start", help="start a mining round; prints its status")
    _add_artifact_params(start)
    start.add_argument("--block-height", type=int, default=0)
    start.add_argument("--node-id", type=int, default=0)
    start.add_argument("--node-count", type=int, help="server default: 1")
    start.add_argument("--group-id", type=int, default=0)
    start.add_argument("--group-count", type=int, help="server default: 1")
    start.add_argument("--callback-url", default="", help="also POST artifacts to URL/generated")
    add_output_flags(start, progress=False)
    for name, help_text in (
        ("stop", "stop the running round (or --round-id)"),
        ("status", "the status of the running or most recent round"),
    ):
        action = actions.add_parser(name, help=help_text)
        action.add_argument("--round-id", help="default: the running round")
        add_output_flags(action, progress=False)

    subscribe = commands.add_parser(
        "subscribe",
        help="stream a round's artifacts until it ends",
        description="Prints a line per batch (--json: one {nonce, vector_b64} object per artifact). A dropped "
        "connection is resumed from the last batch received. Exit status 0 when the round "
        "was stopped, 1 when it failed or the server shut down.",
    )
    subscribe.add_argument("--round-id", help="default: the running round, or else the most recent one")
    subscribe.add_argument("--after-sequence", type=_at_least(0), default=0, help="resume after this batch")
    subscribe.add_argument(
        "--max-retries",
        type=_at_least(0),
        default=DEFAULT_MAX_RETRIES,
        help="reconnects in a row after a dropped connection (default %(default)s)",
    )
    add_output_flags(subscribe, progress=True)

    compute = commands.add_parser(
        "compute",
        help="artifacts of explicit nonces",
        description="Prints `nonce vector_b64` per artifact (--json: one {nonce, vector_b64} object per line).",
    )
    _add_artifact_params(compute)
    compute.add_argument("nonces", type=nonces_argument, nargs="+", metavar="NONCE", help="a nonce, or FIRST..LAST")
    add_output_flags(compute, progress=True)

    validate = commands.add_parser(
        "validate-poc",
        help="recompute a prover's claimed artifacts and judge them",
        description='Claims: the network\'s JSON list [{"nonce": n, "vector_b64": "..."}], or those objects '
        "one per line (the output of subscribe/compute --json). The three stat-test "
        "thresholds are required (the network's for Qwen3-235B: 0.2, 0.1, 0.05).",
    )
    validate.add_argument(
        "claims",
        type=claims_argument,
        nargs="?",
        default=STDIN,
        metavar="CLAIMS",
        help="a JSON file of claims, or - for stdin (the default)",
    )
    _add_artifact_params(validate)
    validate.add_argument(
        "--dist-threshold", type=float, required=True, help="L2 distance above which a claim mismatches"
    )
    validate.add_argument("--p-mismatch", type=float, required=True, help="an honest prover's mismatch rate")
    validate.add_argument("--p-value-threshold", type=float, required=True, help="fraud when the p-value is below this")
    validate.add_argument("--block-height", type=int, default=0)
    validate.add_argument("--node-id", type=int, default=0)
    validate.add_argument("--callback-url", default="", help="also POST the summary to URL/validated")
    validate.add_argument("--request-id", default="")
    add_output_flags(validate, progress=True)
