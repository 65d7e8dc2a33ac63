"""A method handler that refuses the call: what an interceptor returns to turn an RPC away."""

from __future__ import annotations

from typing import Any

import grpc

from server.core.errors import ServiceError, abort_with

# By (request streaming, response streaming).
HANDLER_FACTORIES = {
    (False, False): grpc.unary_unary_rpc_method_handler,
    (False, True): grpc.unary_stream_rpc_method_handler,
    (True, False): grpc.stream_unary_rpc_method_handler,
    (True, True): grpc.stream_stream_rpc_method_handler,
}


def refusing_handler(handler: grpc.RpcMethodHandler, error: ServiceError) -> grpc.RpcMethodHandler:
    """A handler of `handler`'s kind that ends the call with `error` before any response message.

    Same kind, so grpc keeps the method's shape: a stream ends with no message, a unary call with
    the status alone. The request is never read.
    """

    async def refuse(request: Any, context: grpc.aio.ServicerContext) -> None:
        await abort_with(context, error)

    make = HANDLER_FACTORIES[(bool(handler.request_streaming), bool(handler.response_streaming))]
    return make(
        refuse, request_deserializer=handler.request_deserializer, response_serializer=handler.response_serializer
    )
