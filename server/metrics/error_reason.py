"""The ErrorInfo reason a finished RPC's trailers carry (server.core.errors puts it there)."""

from __future__ import annotations

from collections.abc import Iterable

from google.protobuf.message import DecodeError
from google.rpc import error_details_pb2, status_pb2

STATUS_DETAILS_KEY = "grpc-status-details-bin"
# The label value of an error that carries no ErrorInfo (a cancellation, an error grpc raised itself).
NO_REASON = "NONE"

Metadata = Iterable[tuple[str, str | bytes]]


def error_reason(trailing_metadata: Metadata | None) -> str:
    """ErrorInfo.reason from the google.rpc.Status in the trailers, or NO_REASON."""
    for key, value in trailing_metadata or ():
        if key != STATUS_DETAILS_KEY or not isinstance(value, bytes):
            continue
        try:
            status = status_pb2.Status.FromString(value)
        except DecodeError:
            return NO_REASON
        for detail in status.details:
            # types-protobuf's Any.Is takes the pure-Python Descriptor only; DESCRIPTOR may be upb's (the runtime's).
            if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):  # type: ignore[arg-type]
                info = error_details_pb2.ErrorInfo()
                detail.Unpack(info)
                return info.reason or NO_REASON
    return NO_REASON
