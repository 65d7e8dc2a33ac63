"""The request's structured-output constraint as vLLM's StructuredOutputsParams."""

from __future__ import annotations

import json

from vllm.sampling_params import StructuredOutputsParams

from gonka.mlnode.v1 import inference_pb2 as pb
from server.errors import Reason, invalid_field


def constraint_field(request: pb.GenerateRequest) -> str | None:
    """`structured_output.<kind>` of the constraint the request carries, if any."""
    if not request.HasField("structured_output"):
        return None
    kind = request.structured_output.WhichOneof("constraint")
    return None if kind is None else f"structured_output.{kind}"


def structured_outputs_params(request: pb.GenerateRequest) -> StructuredOutputsParams | None:
    if not request.HasField("structured_output"):
        return None
    constraint = request.structured_output
    kind = constraint.WhichOneof("constraint")
    field = f"structured_output.{kind}"
    if kind is None:
        raise invalid_field("structured_output", "set one of json_schema, regex, grammar, choice or json_object")
    if kind == "json_schema":
        return StructuredOutputsParams(json=_json_schema(constraint.json_schema, field))
    if kind == "regex":
        _require(bool(constraint.regex), field, "must not be empty")
        return StructuredOutputsParams(regex=constraint.regex)
    if kind == "grammar":
        _require(bool(constraint.grammar.strip()), field, "must not be empty")
        return StructuredOutputsParams(grammar=constraint.grammar)
    if kind == "choice":
        choices = list(constraint.choice.choices)
        _require(bool(choices), f"{field}.choices", "must hold at least one choice")
        return StructuredOutputsParams(choice=choices)
    _require(constraint.json_object, field, "must be true when chosen")
    return StructuredOutputsParams(json_object=True)


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
