"""The request's structured-output constraint, checked as far as the server can (the engine
compiles it and may still refuse it)."""

from __future__ import annotations

import json

from engine_ext.generation.generation_request import Constraint
from gonka.mlnode.v1 import inference_pb2 as pb
from server.core.errors import Reason, invalid_field


def constraint_field(request: pb.GenerateRequest) -> str | None:
    """`structured_output.<kind>` of the constraint the request carries, if any."""
    if not request.HasField("structured_output"):
        return None
    kind = request.structured_output.WhichOneof("constraint")
    return None if kind is None else f"structured_output.{kind}"


def constraint(request: pb.GenerateRequest) -> Constraint | None:
    if not request.HasField("structured_output"):
        return None
    chosen = request.structured_output
    kind = chosen.WhichOneof("constraint")
    field = f"structured_output.{kind}"
    if kind is None:
        raise invalid_field("structured_output", "set one of json_schema, regex, grammar, choice or json_object")
    if kind == "json_schema":
        return Constraint(kind, _json_schema(chosen.json_schema, field))
    if kind == "regex":
        _require(bool(chosen.regex), field, "must not be empty")
        return Constraint(kind, chosen.regex)
    if kind == "grammar":
        _require(bool(chosen.grammar.strip()), field, "must not be empty")
        return Constraint(kind, chosen.grammar)
    if kind == "choice":
        choices = list(chosen.choice.choices)
        _require(bool(choices), f"{field}.choices", "must hold at least one choice")
        return Constraint(kind, tuple(choices))
    _require(chosen.json_object, field, "must be true when chosen")
    return Constraint(kind, True)


def _json_schema(text: str, field: str) -> str:
    try:
        schema = json.loads(text)
    except json.JSONDecodeError as error:
        raise invalid_field(field, f"not valid JSON: {error}", Reason.INVALID_CONSTRAINT) from error
    _require(isinstance(schema, dict), field, "a JSON Schema must be a JSON object")
    return text


def _require(condition: bool, field: str, message: str) -> None:
    if not condition:
        raise invalid_field(field, message, Reason.INVALID_CONSTRAINT)
