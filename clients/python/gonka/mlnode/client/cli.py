"""`mlnode-client` / `python -m gonka.mlnode.client`: stream a chat or a completion to the terminal.

    mlnode-client chat "Why is the sky blue?" --max-tokens 64
    mlnode-client complete "Once upon a time" --logprobs 5
    mlnode-client info | status | abort REQUEST_ID
"""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

from gonka.mlnode.client.client import DEFAULT_TARGET, InferenceClient
from gonka.mlnode.client.errors import ServerError
from gonka.mlnode.client.requests import build_request
from gonka.mlnode.v1 import inference_pb2 as pb


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mlnode-client", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", default=DEFAULT_TARGET, help="server address (default: %(default)s)")
    parser.add_argument("--timeout", type=float, default=None, help="deadline in seconds")
    commands = parser.add_subparsers(dest="command", required=True)

    for name, help_text in (("chat", "one user turn, rendered with the model's chat template"), ("complete", "raw text completion")):
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
        command.add_argument("--logprobs", type=int, metavar="K", help="print each token's logprob and top-K alternatives")
        command.add_argument("--request-id", default="")
    commands.add_parser("info", help="model information")
    commands.add_parser("status", help="server and engine status")
    abort = commands.add_parser("abort", help="abort an active request")
    abort.add_argument("request_id")
    return parser


def main(argv: list[str] | None = None, out: TextIO = sys.stdout) -> int:
    args = build_parser().parse_args(argv)
    try:
        with InferenceClient(args.target) as client:
            if args.command == "info":
                print(client.model_info(), file=out, end="")
            elif args.command == "status":
                print(client.server_status(include_engine_processes=True), file=out, end="")
            elif args.command == "abort":
                client.abort(args.request_id)
            else:
                _stream(client, args, out)
    except ServerError as error:
        where = f" (field {error.field})" if error.field else ""
        print(f"error: {error.code.name} {error.reason or ''}{where}: {error.message}", file=sys.stderr)
        return 1
    return 0


def _stream(client: InferenceClient, args: argparse.Namespace, out: TextIO) -> None:
    if args.command == "chat":
        turns = ([("system", args.system)] if args.system else []) + [("user", args.text)]
        source = {"messages": turns}
    else:
        source = {"prompt": args.text}
    request = build_request(
        **source,
        request_id=args.request_id,
        include_text=True,
        top_logprobs=args.logprobs,
        max_tokens=args.max_tokens,
        temperature=args.temperature,
        top_p=args.top_p,
        top_k=args.top_k,
        seed=args.seed,
        stop=args.stop,
    )
    for response in client.stream(request, timeout=args.timeout):
        if args.logprobs is None:
            out.write(response.text)
        else:
            _print_logprobs(response, out)
        out.flush()
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
        top = ", ".join(
            f"{batch.top_ids[position * k + j]}:{batch.top_logprobs[position * k + j]:.3f}" for j in range(k)
        )
        out.write(f"  token {token_id:>6}  logprob {batch.logprobs[position]:9.4f}  rank {batch.ranks[position]:>6}  top [{top}]\n")
