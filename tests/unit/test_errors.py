"""The server's rich error status, read back by the Python client."""

from __future__ import annotations

import grpc

from gonka.mlnode.client import ServerError
from server.core.errors import Reason, ServiceError


class FailedCall(grpc.RpcError):
    """What a failed call looks like to a client: code, details and the trailers the server sent."""

    def __init__(self, error: ServiceError) -> None:
        self._error = error

    def code(self) -> grpc.StatusCode:
        return self._error.code

    def details(self) -> str:
        return self._error.message

    def trailing_metadata(self):
        return self._error.trailing_metadata()


def test_reason_field_and_retry_delay_survive_the_round_trip() -> None:
    sent = ServiceError(
        grpc.StatusCode.UNAVAILABLE, Reason.SHUTTING_DOWN, "going down", field="x.y", retry_after_seconds=1.5
    )
    received = ServerError.from_rpc_error(FailedCall(sent))
    assert received.code == grpc.StatusCode.UNAVAILABLE
    assert (received.reason, received.field, received.retry_after_seconds) == ("SHUTTING_DOWN", "x.y", 1.5)
    assert received.message == "going down"


def test_the_status_proto_names_the_field_in_a_bad_request_detail() -> None:
    from google.rpc import error_details_pb2

    status = ServiceError(
        grpc.StatusCode.INVALID_ARGUMENT, Reason.INVALID_FIELD, "sampling.n: bad", field="sampling.n"
    ).to_status_proto()
    assert status.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    bad_request = error_details_pb2.BadRequest()
    assert status.details[1].Unpack(bad_request)
    assert bad_request.field_violations[0].field == "sampling.n"
