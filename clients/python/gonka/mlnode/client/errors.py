"""The server's rich errors (google.rpc.Status in the trailers) as one exception type."""

from __future__ import annotations

from collections.abc import Iterable
from typing import cast

import grpc
from google.rpc import error_details_pb2, status_pb2

STATUS_DETAILS_KEY = "grpc-status-details-bin"


class ServerError(Exception):
    """A failed call: gRPC code, the server's stable reason (an ErrorReason name) and the field at fault."""

    def __init__(
        self,
        code: grpc.StatusCode,
        message: str,
        reason: str | None = None,
        field: str | None = None,
        retry_after_seconds: float | None = None,
    ) -> None:
        super().__init__(f"{code.name}: {message}" + (f" [{reason}]" if reason else ""))
        self.code = code
        self.message = message
        self.reason = reason
        self.field = field
        self.retry_after_seconds = retry_after_seconds

    @classmethod
    def from_rpc_error(cls, error: grpc.RpcError) -> ServerError:
        code = error.code()
        message = error.details() or ""
        reason = field = retry_after = None
        # (key, value) pairs: grpc's own named tuples, or grpc.aio's Metadata (typeshed's _Metadatum is not iterable).
        trailers = cast(Iterable[tuple[str, str | bytes]], error.trailing_metadata() or ())
        for key, value in trailers:
            if key != STATUS_DETAILS_KEY or not isinstance(value, bytes):  # a -bin key's value is bytes
                continue
            status = status_pb2.Status.FromString(value)
            for detail in status.details:
                # types-protobuf's Any.Is takes the pure-Python Descriptor only; DESCRIPTOR may be upb's.
                if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):  # type: ignore[arg-type]
                    info = error_details_pb2.ErrorInfo()
                    detail.Unpack(info)
                    reason = info.reason
                    field = info.metadata.get("field", field)
                # types-protobuf's Any.Is takes the pure-Python Descriptor only; DESCRIPTOR may be upb's.
                elif detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):  # type: ignore[arg-type]
                    retry = error_details_pb2.RetryInfo()
                    detail.Unpack(retry)
                    retry_after = retry.retry_delay.ToTimedelta().total_seconds()
        return cls(code, message, reason, field, retry_after)
