"""The JSON-lines format of ValidateInference items: what `complete --record` / `chat --record` print
and `validate-inference` reads. One JSON object per line (blank lines are skipped):

    {"request": {...GenerateRequest in proto JSON...},
     "token_ids": [9707, 11, ...],                        # the executor's generated tokens
     "top_logprobs": [{"9707": -0.12, "40": -2.5}, ...],  # per position: the chain's {id: logprob}
     "threshold": 0.94, "mode": "processed"}

The original request is either `request` (proto JSON, the protos' field names or lowerCamelCase) or
the simple fields below, flat in the object, never both:
    prompt | messages ([role, content] pairs or {"role", "content"} objects) | prompt_token_ids,
    any SamplingOptions field (max_tokens, temperature, top_p, top_k, seed, stop, ...),
    chat_template_kwargs, add_generation_prompt, json_schema | regex | grammar | choice | json_object.
`threshold` is required unless the validator gives one for every item; `mode` ("raw" or "processed")
is optional (unset: the server detects it); `executor_could_not_serve` (default false) needs no
positions. Any other key is an error: a misspelt key must not be dropped silently.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from google.protobuf import json_format

from gonka.mlnode.client.proto_json import message_to_dict
from gonka.mlnode.client.requests import SAMPLING_FIELDS, build_request
from gonka.mlnode.client.results import Output
from gonka.mlnode.client.validation import MODES, inference_item
from gonka.mlnode.v1 import inference_pb2 as pb
from gonka.mlnode.v1 import validation_pb2 as vpb

ITEM_KEYS = frozenset({"request", "token_ids", "top_logprobs", "threshold", "mode", "executor_could_not_serve"})
# The simple fields' names, and the build_request argument each one is.
SIMPLE_INPUTS = {"prompt": "prompt", "messages": "messages", "prompt_token_ids": "token_ids"}
SIMPLE_OPTIONS = (
    frozenset(
        {"chat_template_kwargs", "add_generation_prompt", "json_schema", "regex", "grammar", "choice", "json_object"}
    )
    | SAMPLING_FIELDS
)
SIMPLE_KEYS = frozenset(SIMPLE_INPUTS) | SIMPLE_OPTIONS


def record(request: pb.GenerateRequest, output: Output, mode: str | None) -> dict[str, Any]:
    """One output of a generation as an item (without a threshold: that is the validator's). The
    output must carry the chain's lists (`chain_top_logprobs`), one per generated token."""
    if len(output.logprobs.chain_top) != len(output.token_ids):
        raise ValueError(
            f"output {output.index}: {len(output.token_ids)} tokens but {len(output.logprobs.chain_top)} chain lists "
            "(ask with chain_top_logprobs and top_logprobs >= 1)"
        )
    item: dict[str, Any] = {
        "request": message_to_dict(request),
        "token_ids": list(output.token_ids),
        "top_logprobs": [{str(token): logprob for token, logprob in top.items()} for top in output.logprobs.chain_top],
    }
    if mode is not None:
        item["mode"] = mode
    return item


def parse_items(text: str) -> list[vpb.InferenceItem]:
    """The items of a JSON-lines text, in order. An item without a threshold is returned with it
    unset (the caller supplies one). ValueError names the line of the first bad item."""
    items = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            items.append(parse_item(json.loads(line)))
        except (ValueError, TypeError, json_format.ParseError) as error:
            raise ValueError(f"line {number}: {error}") from None
    if not items:
        raise ValueError("no items")
    return items


def parse_item(document: Any) -> vpb.InferenceItem:
    if not isinstance(document, dict):
        raise ValueError(f"expected an item object, got {type(document).__name__}")
    unknown = set(document) - ITEM_KEYS - SIMPLE_KEYS
    if unknown:
        raise ValueError(f"unknown key(s) {', '.join(sorted(unknown))}")
    could_not_serve = document.get("executor_could_not_serve", False)
    if not isinstance(could_not_serve, bool):
        raise ValueError(f"executor_could_not_serve must be true or false, got {could_not_serve!r}")
    mode = document.get("mode")
    if not (mode is None or isinstance(mode, str) and mode in MODES):
        raise ValueError(f'mode must be "raw" or "processed", got {mode!r}')
    if could_not_serve and "token_ids" not in document:
        token_ids: list[int] = []
        top_lists: list[dict[int, float]] = []
    else:
        token_ids = _token_ids(document.get("token_ids"), "token_ids")
        top_lists = _top_lists(document.get("top_logprobs"))
    # Unset rather than a default when absent: then the threshold is the validator's to give.
    threshold = _number(document["threshold"], "threshold") if "threshold" in document else None
    return inference_item(
        _request(document),
        token_ids,
        top_lists,
        threshold=threshold,
        mode=mode,
        executor_could_not_serve=could_not_serve,
    )


def _request(document: Mapping[str, Any]) -> pb.GenerateRequest:
    simple = {key: value for key, value in document.items() if key in SIMPLE_KEYS}
    if "request" in document:
        if simple:
            raise ValueError(
                f"give the request either as `request` or as simple fields, not both ({', '.join(sorted(simple))})"
            )
        if not isinstance(document["request"], dict):
            raise ValueError("request must be a GenerateRequest object in proto JSON")
        return json_format.ParseDict(document["request"], pb.GenerateRequest())
    if not set(simple) & set(SIMPLE_INPUTS):
        raise ValueError(f"no request: give `request`, or one of {', '.join(SIMPLE_INPUTS)}")
    _check_sampling(simple)
    arguments = {SIMPLE_INPUTS.get(key, key): value for key, value in simple.items()}
    if "messages" in arguments:
        arguments["messages"] = _messages(arguments["messages"])
    if "token_ids" in arguments:
        arguments["token_ids"] = _token_ids(arguments["token_ids"], "prompt_token_ids")
    return build_request(**arguments)


def _check_sampling(simple: Mapping[str, Any]) -> None:
    """Field by field, so that a bad value's error names its field (protobuf's does not)."""
    for name in sorted(simple.keys() & SAMPLING_FIELDS):
        try:
            pb.SamplingOptions(**{name: simple[name]})
        except (TypeError, ValueError) as error:
            raise ValueError(f"{name}: {error}") from None


def _messages(value: Any) -> list[tuple[str, str]]:
    if not isinstance(value, list):
        raise ValueError("messages must be a list")
    turns = []
    for turn in value:
        if isinstance(turn, dict) and set(turn) == {"role", "content"}:
            turns.append((turn["role"], turn["content"]))
        elif isinstance(turn, list) and len(turn) == 2:
            turns.append((turn[0], turn[1]))
        else:
            raise ValueError(f'a message is [role, content] or {{"role", "content"}}, got {turn!r}')
    return turns


def _token_ids(value: Any, name: str) -> list[int]:
    if not isinstance(value, list) or not all(_is_int(token) and 0 <= token < 2**32 for token in value):
        raise ValueError(f"{name} must be a list of token ids (integers, 0 <= id < 2^32)")
    return value


def _top_lists(value: Any) -> list[dict[int, float]]:
    if not isinstance(value, list):
        raise ValueError("top_logprobs must be a list of {token id: logprob} objects, one per position")
    lists = []
    for position, top in enumerate(value):
        if not isinstance(top, dict):
            raise ValueError(f"top_logprobs[{position}] must be a {{token id: logprob}} object")
        lists.append(
            {
                _token_key(key, position): _number(logprob, f"top_logprobs[{position}][{key}]")
                for key, logprob in top.items()
            }
        )
    return lists


def _token_key(key: str, position: int) -> int:
    # JSON object keys are strings: a token id key is its decimal form.
    if not (key.isascii() and key.isdigit()):
        raise ValueError(f"top_logprobs[{position}]: key {key!r} is not a token id")
    return int(key)


def _number(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a number, got {value!r}")
    return float(value)


def _is_int(value: Any) -> bool:
    # bool is an int subclass; true/false in a list of ids is a broken record, not ids 1/0.
    return isinstance(value, int) and not isinstance(value, bool)
