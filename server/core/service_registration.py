"""Registers a servicer whose methods take the request's raw bytes and decode it themselves.

With grpc's generated registration, a request that fails to parse (a corrupt protobuf, invalid
UTF-8 in a string field) never reaches the servicer: grpc answers UNKNOWN with its internal
DecodeError text and no ErrorInfo, while the contract promises INVALID_ARGUMENT for bad input of
any kind. Decoding inside the method lets that failure be answered like any other bad input.
"""

from __future__ import annotations

from typing import TypeVar

import grpc
from google.protobuf import message_factory
from google.protobuf.descriptor import ServiceDescriptor
from google.protobuf.message import DecodeError, Message

from server.core.errors import Reason, ServiceError

MessageT = TypeVar("MessageT", bound=Message)


def add_raw_request_service(server: grpc.aio.Server, service: ServiceDescriptor, servicer: object) -> None:
    """Every method of `service` served by the servicer's method of the same name, given raw bytes."""
    handlers: dict[str, grpc.RpcMethodHandler] = {}
    for method in service.methods:
        if method.client_streaming:
            raise NotImplementedError(f"{method.full_name}: client-streaming methods are not supported here")
        serialize = message_factory.GetMessageClass(method.output_type).SerializeToString
        make_handler = (
            grpc.unary_stream_rpc_method_handler if method.server_streaming else grpc.unary_unary_rpc_method_handler
        )
        handlers[method.name] = make_handler(
            getattr(servicer, method.name), request_deserializer=None, response_serializer=serialize
        )
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service.full_name, handlers),))


def decode_request(message_class: type[MessageT], raw: bytes) -> MessageT:
    try:
        return message_class.FromString(raw)
    except DecodeError as error:
        raise ServiceError(
            grpc.StatusCode.INVALID_ARGUMENT,
            Reason.MALFORMED_REQUEST,
            f"the request is not a valid {message_class.DESCRIPTOR.full_name}: {error}",
        ) from error
