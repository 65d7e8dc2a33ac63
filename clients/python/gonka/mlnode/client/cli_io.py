"""The CLI's input and output conventions, shared by every command: an input file or `-` for stdin,
the --json and --progress flags, and proto messages in JSON.

JSON output is the proto JSON mapping (google.protobuf.json_format) with the protos' field names,
fields at their default value included (a script need not know the defaults) and int64 as numbers.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TextIO

from google.protobuf.message import Message

from gonka.mlnode.client.proto_json import message_to_dict

STDIN = "-"


def read_input(path: str) -> str:
    """The text of the file at `path`, or of stdin for `-`; OSError when it cannot be read."""
    return sys.stdin.read() if path == STDIN else Path(path).read_text()


def input_name(path: str) -> str:
    return "stdin" if path == STDIN else path


def add_output_flags(command: argparse.ArgumentParser, progress: bool) -> None:
    command.add_argument("--json", action="store_true", help="machine-readable output on stdout")
    if progress:
        command.add_argument(
            "--progress",
            action=argparse.BooleanOptionalAction,
            default=None,
            help="a progress line on stderr (default: on, unless --json)",
        )


def wants_progress(args: argparse.Namespace) -> bool:
    return args.progress if args.progress is not None else not args.json


def message_json(message: Message) -> str:
    """One line of JSON."""
    return json.dumps(message_to_dict(message, print_defaults=True))


def print_message(message: Message, as_json: bool, out: TextIO) -> None:
    """A line of JSON, or the proto text format (which ends its own last line)."""
    print(message_json(message) if as_json else message, file=out, end="\n" if as_json else "")
