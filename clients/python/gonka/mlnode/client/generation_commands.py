"""The CLI's `chat` and `complete`: one Generate call, printed three ways.

(default)  the text as it streams, or each token's logprobs with --logprobs, and a finish line
--json     one line per GenerateResponse message as it arrives, in proto JSON (cli_io.message_json)
--record   after the generation, one ValidateInference item per output (inference_records), which
           `validate-inference` reads: the executor's side of a validation, recorded
"""

from __future__ import annotations

import argparse
import json
from typing import TextIO

from gonka.mlnode.client.cli_io import message_json
from gonka.mlnode.client.client import InferenceClient
from gonka.mlnode.client.inference_records import record
from gonka.mlnode.client.requests import LOGPROBS_MODES, build_request
from gonka.mlnode.v1 import inference_pb2 as pb

GENERATION_COMMANDS = frozenset({"chat", "complete"})


def add_generation_commands(commands: argparse._SubParsersAction) -> None:
    for name, help_text in (
        ("chat", "one user turn, rendered with the model's chat template"),
        ("complete", "raw text completion"),
    ):
        command = commands.add_parser(name, help=help_text)
        command.add_argument("text")
        if name == "chat":
            command.add_argument("--system", help="a system message before the user turn")
        command.add_argument("--max-tokens", type=int, default=128)
        command.add_argument("--temperature", type=float)
        command.add_argument("--top-p", type=float)
        command.add_argument("--top-k", type=int)
        command.add_argument("--seed", type=int)
        command.add_argument("--stop", action="append", help="stop string (repeatable)")
        command.add_argument(
            "--logprobs", type=int, metavar="K", help="print each token's logprob and top-K alternatives"
        )
        command.add_argument("--logprobs-mode", choices=sorted(LOGPROBS_MODES), help="default: the server's")
        command.add_argument(
            "--chain-top-logprobs",
            action="store_true",
            help="also each position's list as the chain records it (needs --logprobs K >= 1)",
        )
        command.add_argument("--request-id", default="")
        output = command.add_mutually_exclusive_group()
        output.add_argument("--json", action="store_true", help="one proto JSON line per response message")
        output.add_argument(
            "--record",
            action="store_true",
            help="print the generation as a validate-inference item (implies --chain-top-logprobs; needs --logprobs K >= 1)",
        )


def generation_usage_error(args: argparse.Namespace) -> str | None:
    """What is wrong with a chat/complete command line that argparse cannot see, if anything."""
    if (args.record or args.chain_top_logprobs) and not args.logprobs:
        # The chain's lists are top_logprobs wide; the network records 5.
        return "--record and --chain-top-logprobs need --logprobs K >= 1 (the network records 5)"
    return None


def run_generation(client: InferenceClient, args: argparse.Namespace, out: TextIO) -> int:
    request = _request(args)
    if args.record:
        generation = client.generate(request, timeout=args.timeout)
        for index in sorted(generation.outputs):
            out.write(json.dumps(record(request, generation.outputs[index], args.logprobs_mode)) + "\n")
        return 0
    for response in client.stream(request, timeout=args.timeout):
        if args.json:
            out.write(message_json(response) + "\n")
        else:
            _print_human(response, args.logprobs is not None, out)
        out.flush()
    return 0


def _request(args: argparse.Namespace) -> pb.GenerateRequest:
    if args.command == "chat":
        turns = ([("system", args.system)] if args.system else []) + [("user", args.text)]
        source = {"messages": turns}
    else:
        source = {"prompt": args.text}
    return build_request(
        **source,
        request_id=args.request_id,
        include_text=True,
        top_logprobs=args.logprobs,
        logprobs_mode=args.logprobs_mode,
        chain_top_logprobs=args.chain_top_logprobs or args.record,
        max_tokens=args.max_tokens,
        temperature=args.temperature,
        top_p=args.top_p,
        top_k=args.top_k,
        seed=args.seed,
        stop=args.stop,
    )


def _print_human(response: pb.GenerateResponse, with_logprobs: bool, out: TextIO) -> None:
    if with_logprobs:
        _print_logprobs(response, out)
    else:
        out.write(response.text)
    if response.HasField("finish"):
        finish = response.finish
        reason = pb.FinishReason.Name(finish.reason).removeprefix("FINISH_REASON_").lower()
        out.write(
            f"\n[output {response.output_index}: {reason}, {finish.usage.prompt_tokens} prompt + "
            f"{finish.usage.completion_tokens} completion tokens]\n"
        )


def _print_logprobs(response: pb.GenerateResponse, out: TextIO) -> None:
    batch = response.tokens
    if response.text:
        out.write(f"text: {response.text!r}\n")
    k = batch.top_k
    for position, token_id in enumerate(batch.ids):
        entries = range(position * k, (position + 1) * k)
        top = ", ".join(f"{batch.top_ids[j]}:{batch.top_logprobs[j]:.3f}" for j in entries)
        chain = (
            ", ".join(f"{batch.chain_top_ids[j]}:{batch.chain_top_logprobs[j]:.3f}" for j in entries)
            if batch.chain_top_ids
            else ""
        )
        out.write(
            f"  token {token_id:>6}  logprob {batch.logprobs[position]:9.4f}  rank {batch.ranks[position]:>6}  top [{top}]"
            + (f"  chain [{chain}]" if chain else "")
            + "\n"
        )
