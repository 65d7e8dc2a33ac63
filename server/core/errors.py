"""Errors the server returns: a gRPC code, a stable ErrorInfo reason, and the offending field.

Every failure leaves as a google.rpc.Status in the `grpc-status-details-bin` trailer, so clients
in any language can read the reason (an `ErrorReason` name from errors.proto) and, for bad input,
a BadRequest field violation naming the field.
"""

from __future__ import annotations

from datetime import timedelta
from typing import NoReturn

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.protobuf.message import Message
from google.rpc import error_details_pb2, status_pb2

from gonka.mlnode.v1 import errors_pb2

ERROR_DOMAIN = "mlnode.gonka.ai"
Reason = errors_pb2.ErrorReason
# A client's value quoted in a message is cut to this many characters. The message travels three times
# in the trailers (grpc-message, and the status and its BadRequest in grpc-status-details-bin), and a gRPC
# client refuses trailers over 8 KiB by default: a 4 kB id echoed whole came back RESOURCE_EXHAUSTED.
ECHO_CHARS = 64
# Whatever a message holds, it is cut to this many characters (the same reason).
MAX_MESSAGE_CHARS = 1024


def echoed(value: str) -> str:
    """`value` quoted for an error message (ASCII, escapes shown), cut to ECHO_CHARS characters with its
    length said when longer."""
    if len(value) <= ECHO_CHARS:
        return ascii(value)
    return f"{value[:ECHO_CHARS]!a}... (cut: {len(value)} characters)"


class ServiceError(Exception):
    """A failure with a definite gRPC outcome."""

    def __init__(
        self,
        code: grpc.StatusCode,
        reason: int,
        message: str,
        field: str | None = None,
        retry_after_seconds: float | None = None,
        metadata: dict[str, str] | None = None,
    ) -> None:
        if len(message) > MAX_MESSAGE_CHARS:
            message = f"{message[:MAX_MESSAGE_CHARS]}... (cut: {len(message)} characters)"
        super().__init__(message)
        # Extra ErrorInfo.metadata entries (for example the identity of a conflicting round).
        self.metadata = dict(metadata or {})
        self.code = code
        self.reason = reason
        self.message = message
        self.field = field
        self.retry_after_seconds = retry_after_seconds

    @property
    def reason_name(self) -> str:
        return Reason.Name(self.reason)

    def to_status_proto(self) -> status_pb2.Status:
        info = error_details_pb2.ErrorInfo(reason=self.reason_name, domain=ERROR_DOMAIN)
        info.metadata.update(self.metadata)
        if self.field:
            info.metadata["field"] = self.field
        details: list[Message] = [info]
        if self.field:
            violation = error_details_pb2.BadRequest.FieldViolation(field=self.field, description=self.message)
            details.append(error_details_pb2.BadRequest(field_violations=[violation]))
        if self.retry_after_seconds is not None:
            delay = duration_pb2.Duration()
            delay.FromTimedelta(timedelta(seconds=self.retry_after_seconds))
            details.append(error_details_pb2.RetryInfo(retry_delay=delay))
        packed = []
        for detail in details:
            wrapper = any_pb2.Any()
            wrapper.Pack(detail)
            packed.append(wrapper)
        return status_pb2.Status(code=self.code.value[0], message=self.message, details=packed)

    def trailing_metadata(self) -> tuple[tuple[str, bytes | str], ...]:
        trailers: tuple[tuple[str, bytes | str], ...] = (
            ("grpc-status-details-bin", self.to_status_proto().SerializeToString()),
        )
        if self.retry_after_seconds is not None:
            # gRPC's own retry policies read this trailer (gRFC A6), not RetryInfo.
            trailers += (("grpc-retry-pushback-ms", str(round(self.retry_after_seconds * 1000))),)
        return trailers


def invalid_field(field: str, message: str, reason: int = Reason.INVALID_FIELD) -> ServiceError:
    return ServiceError(grpc.StatusCode.INVALID_ARGUMENT, reason, f"{field}: {message}", field=field)


async def abort_with(context: grpc.aio.ServicerContext, error: ServiceError) -> NoReturn:
    """Ends the RPC with `error` (raises, as grpc.aio's abort does)."""
    await context.abort(error.code, error.message, trailing_metadata=error.trailing_metadata())
