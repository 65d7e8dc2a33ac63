"""The CLI's `validate-inference`: ValidationService.ValidateInference over a JSON-lines file of items
(inference_records), such as `complete --record` prints.

stdout: one line per item as its verdict arrives (completion order, each with its item's 0-based
place in the input): a sentence, or with --json the ValidateInferenceResponse in proto JSON. stderr:
a progress line, then the tally. Exit status 0 only if every item passed; 1 if any failed, could not
be judged, or went unanswered (a failed call); 2 for a usage error, bad input included.
"""

from __future__ import annotations

import argparse
from typing import TextIO

from gonka.mlnode.client.cli_io import STDIN, add_output_flags, input_name, message_json, read_input, wants_progress
from gonka.mlnode.client.client import InferenceClient
from gonka.mlnode.client.inference_records import parse_items
from gonka.mlnode.client.progress import Progress
from gonka.mlnode.client.verdicts import Tally, verdict_line
from gonka.mlnode.v1 import validation_pb2 as vpb

# ValidateInferenceRequest's limit (validation.proto): a longer input is sent as several calls, one
# after another, so the caller need not split its files.
MAX_ITEMS_PER_CALL = 1024
USAGE_ERROR = 2


def items_argument(path: str) -> list[vpb.InferenceItem]:
    """The items of the JSON-lines file at `path`, or of stdin for `-`."""
    try:
        return parse_items(read_input(path))
    except OSError as error:
        raise argparse.ArgumentTypeError(f"cannot read {path}: {error.strerror}") from None
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"{input_name(path)}: {error}") from None


def add_validate_inference_command(commands: argparse._SubParsersAction) -> None:
    command = commands.add_parser(
        "validate-inference",
        help="replay executors' recorded inferences and judge them",
        description="Items: JSON lines, one item per line, as `complete --record` and `chat --record` print them "
        "(README, Clients). Prints one verdict per item; exit status 0 only if every item passed.",
    )
    command.add_argument(
        "items",
        type=items_argument,
        nargs="?",
        default=STDIN,
        metavar="ITEMS",
        help="a JSON-lines file of items, or - for stdin (the default)",
    )
    command.add_argument(
        "--threshold",
        type=float,
        help="judge every item against this, replacing the items' own (the chain's for Qwen3-235B: "
        "0.94); without it every item needs its own",
    )
    add_output_flags(command, progress=True)


def run_validate_inference(client: InferenceClient, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    items: list[vpb.InferenceItem] = args.items
    if args.threshold is not None:
        for item in items:
            item.threshold = args.threshold
    unset = [index for index, item in enumerate(items) if not item.HasField("threshold")]
    if unset:
        print(f"error: item(s) {', '.join(map(str, unset[:10]))} have no threshold: give --threshold", file=err)
        return USAGE_ERROR
    tally = Tally(len(items))
    progress = Progress(err, enabled=wants_progress(args))
    try:
        for start in range(0, len(items), MAX_ITEMS_PER_CALL):
            for response in client.stream_validate_inference(
                items[start : start + MAX_ITEMS_PER_CALL], timeout=args.timeout
            ):
                response.index += start  # the server numbers within its call; the input, across calls
                tally.add(response)
                progress.clear()
                print(message_json(response) if args.json else verdict_line(response), file=out, flush=True)
                progress.show(f"validate-inference: {tally}, {progress.rate(tally.answered):.1f} items/s")
    finally:
        # Also after a failed call: the tally says how many items it left unanswered.
        progress.clear()
        print(f"validate-inference: {tally}", file=err)
    return 0 if tally.all_passed else 1
