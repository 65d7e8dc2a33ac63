"""Request bodies read as JSON whatever their Content-Type says (the API node sends some management POSTs with
none: spec section 0), and checked against their model with one refusal per kind of fault: 400 for a body
that is not JSON, 422 for JSON that does not fit the model (a wrong type, a missing field), as the deployed
node's FastAPI answers it; both name the first offending field."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import pydantic
from fastapi import Request

from server.core.errors import echoed
from server.http.errors import HttpError

Model = TypeVar("Model", bound=pydantic.BaseModel)


def parse_body(model: type[Model], raw: bytes) -> Model:
    """An empty body is no JSON (400)."""
    try:
        return model.model_validate_json(raw)
    except pydantic.ValidationError as error:
        first = error.errors(include_url=False)[0]
        param = ".".join(str(part) for part in first["loc"]) or None
        if first["type"] == "json_invalid":
            raise HttpError(400, "INVALID_JSON", f"the body is not JSON: {first['msg']}") from None
        if param is None:
            raise HttpError(422, "INVALID_FIELD", f"the body must be a JSON object: {first['msg']}") from None
        detail = first["msg"]
        # A scalar is echoed (cut short); a list or object would cost its whole repr to print.
        if first["type"] != "missing" and isinstance(first["input"], (str, int, float, bool, type(None))):
            detail += f", got {echoed(repr(first['input']))}"
        raise HttpError(422, "INVALID_FIELD", f"{param}: {detail}", param) from None


def json_body(model: type[Model]) -> Callable[[Request], Awaitable[Model]]:
    """A FastAPI dependency that reads the request's body as `model`."""

    async def read(request: Request) -> Model:
        return parse_body(model, await request.body())

    return read
