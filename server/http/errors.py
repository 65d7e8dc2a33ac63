"""Every refusal of the HTTP API as one JSON shape, `{"error": {"message", "type", "param", "code"}}` (the shape
vLLM's OpenAI server answers with, so both ports read alike), whatever raised it: this layer's own HttpError, a
ServiceError from the objects the gRPC services share (its gRPC code mapped to an HTTP status), FastAPI's and
Starlette's own refusals (unknown path, wrong method, a bad path parameter), or an unexpected failure."""

from __future__ import annotations

import math

import grpc
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from server.core.errors import ServiceError
from server.poc.gate.admission import Admission
from server.translation.engine_failures import engine_failure

# gRPC's codes as HTTP statuses (the mapping gRPC's own HTTP gateways use); anything else is a 500.
HTTP_STATUS_OF_CODE = {
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.OUT_OF_RANGE: 400,
    grpc.StatusCode.UNAUTHENTICATED: 401,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.NOT_FOUND: 404,
    # A request that names another model, or a round while one runs: the deployed node answers 409 to both.
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.FAILED_PRECONDITION: 409,
    grpc.StatusCode.ABORTED: 409,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.CANCELLED: 499,
    grpc.StatusCode.UNIMPLEMENTED: 501,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
}


class HttpError(Exception):
    """A refusal decided in this layer: its status, a stable type, and the offending field where there is one."""

    def __init__(
        self, status: int, error_type: str, message: str, param: str | None = None, retry_after: float | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.error_type = error_type
        self.message = message
        self.param = param
        self.retry_after = retry_after


def http_error_of(error: ServiceError) -> HttpError:
    return HttpError(
        HTTP_STATUS_OF_CODE.get(error.code, 500),
        error.reason_name,
        error.message,
        error.field,
        error.retry_after_seconds,
    )


def error_response(error: HttpError) -> JSONResponse:
    headers = {} if error.retry_after is None else {"Retry-After": str(max(1, math.ceil(error.retry_after)))}
    body = {"error": {"message": error.message, "type": error.error_type, "param": error.param, "code": error.status}}
    return JSONResponse(body, status_code=error.status, headers=headers)


def install_error_handlers(app: FastAPI, admission: Admission) -> None:
    """`admission`: read when an unexpected failure is classified (a paused engine while shutting down is that)."""

    async def on_http_error(_request: Request, error: Exception) -> JSONResponse:
        assert isinstance(error, HttpError)
        return error_response(error)

    async def on_service_error(_request: Request, error: Exception) -> JSONResponse:
        assert isinstance(error, ServiceError)
        return error_response(http_error_of(error))

    async def on_invalid_parameters(_request: Request, error: Exception) -> JSONResponse:
        assert isinstance(error, RequestValidationError)
        first = error.errors()[0]
        param = ".".join(str(part) for part in first["loc"][1:]) or None
        return error_response(HttpError(422, "INVALID_FIELD", f"{param}: {first['msg']}", param))

    async def on_starlette_refusal(_request: Request, error: Exception) -> JSONResponse:
        assert isinstance(error, HTTPException)
        reason = {404: "NOT_FOUND", 405: "METHOD_NOT_ALLOWED"}.get(error.status_code, "HTTP_ERROR")
        return error_response(HttpError(error.status_code, reason, str(error.detail)))

    async def on_unexpected(_request: Request, error: Exception) -> JSONResponse:
        # engine_failure logs what it does not recognise (with the traceback) and names what it does.
        return error_response(http_error_of(engine_failure(error, None, admission)))

    app.add_exception_handler(HttpError, on_http_error)
    app.add_exception_handler(ServiceError, on_service_error)
    app.add_exception_handler(RequestValidationError, on_invalid_parameters)
    app.add_exception_handler(HTTPException, on_starlette_refusal)
    app.add_exception_handler(Exception, on_unexpected)
