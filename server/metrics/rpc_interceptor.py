"""Observes every RPC for server.metrics.rpc_metrics: its start, first response message and status.

It must be the first interceptor, so that it wraps the handler the others settled on: a call that
authorization or the PoC gate refuses is counted with its code and reason like any other.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from typing import Any

import grpc

from server.core.refusing_handler import HANDLER_FACTORIES
from server.metrics.error_reason import NO_REASON, error_reason
from server.metrics.rpc_metrics import Rpc, RpcMetrics

Behavior = Callable[[Any, grpc.aio.ServicerContext], Any]
# A client's deadline timer starts before its request leaves, the server's when the request arrives; so the cancel
# a client sends when its own deadline passes reaches the server a little before the server's deadline (1-2 ms on
# loopback; up to the request's extra transit, a connection set-up included, elsewhere). The client has seen
# DEADLINE_EXCEEDED all the same.
DEADLINE_SLACK_S = 0.25
BEHAVIOR_ATTRIBUTES = {
    (False, False): "unary_unary",
    (False, True): "unary_stream",
    (True, False): "stream_unary",
    (True, True): "stream_stream",
}


class MetricsInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, metrics: RpcMetrics) -> None:
        self._metrics = metrics

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any] | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        handler = await continuation(handler_call_details)
        if handler is None:
            # grpc answers UNIMPLEMENTED. Not counted: the method name is whatever the client sent,
            # and a label per name would let any client grow the endpoint without bound.
            return handler
        rpc = Rpc.of(handler_call_details.method, handler.request_streaming, handler.response_streaming)
        return observed_handler(handler, rpc, self._metrics)


def observed_handler(handler: grpc.RpcMethodHandler, rpc: Rpc, metrics: RpcMetrics) -> grpc.RpcMethodHandler:
    """A handler of the same kind whose behavior reports to `metrics`. Every handler of this server is
    asynchronous: an async generator (a response stream whose messages are timed) or a coroutine."""
    kind = (bool(handler.request_streaming), bool(handler.response_streaming))
    behavior = getattr(handler, BEHAVIOR_ATTRIBUTES[kind])
    observe = _observed_stream if inspect.isasyncgenfunction(behavior) else _observed_call
    return HANDLER_FACTORIES[kind](
        observe(behavior, rpc, metrics),
        request_deserializer=handler.request_deserializer,
        response_serializer=handler.response_serializer,
    )


def _observed_stream(behavior: Behavior, rpc: Rpc, metrics: RpcMetrics) -> Behavior:
    async def observed(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        started = metrics.started(rpc)
        failure: BaseException | None = None
        first = True
        try:
            # aclosing: when grpc closes this generator (the client went away), the servicer's own
            # generator is closed at once too, and frees its engine request then, not when collected.
            async with aclosing(behavior(request, context)) as messages:
                async for message in messages:
                    if first:
                        first = False
                        metrics.first_message(rpc, started)
                    yield message
        except BaseException as error:
            failure = error
            raise
        finally:
            metrics.finished(rpc, started, *_outcome(failure, context))

    return observed


def _observed_call(behavior: Behavior, rpc: Rpc, metrics: RpcMetrics) -> Behavior:
    async def observed(request: Any, context: grpc.aio.ServicerContext) -> Any:
        started = metrics.started(rpc)
        failure: BaseException | None = None
        try:
            return await behavior(request, context)
        except BaseException as error:
            failure = error
            raise
        finally:
            metrics.finished(rpc, started, *_outcome(failure, context))

    return observed


def _outcome(failure: BaseException | None, context: grpc.aio.ServicerContext) -> tuple[grpc.StatusCode, str]:
    """The status the client receives, and the ErrorInfo reason its trailers carry."""
    if failure is None:
        return context.code() or grpc.StatusCode.OK, NO_REASON
    if isinstance(failure, grpc.aio.AbortError):
        # context.abort set the code and trailers before it raised.
        return context.code() or grpc.StatusCode.UNKNOWN, error_reason(context.trailing_metadata())
    if isinstance(failure, (asyncio.CancelledError, GeneratorExit)):
        # The client went away or its deadline passed: grpc cancels the handler either way.
        return (
            grpc.StatusCode.DEADLINE_EXCEEDED
            if deadline_passed(context.time_remaining())
            else grpc.StatusCode.CANCELLED
        ), NO_REASON
    # grpc answers an exception that escapes a handler with UNKNOWN.
    return grpc.StatusCode.UNKNOWN, NO_REASON


def deadline_passed(time_remaining: float | None) -> bool:
    """Whether a call cancelled with this much of its deadline left was cancelled by that deadline."""
    return time_remaining is not None and time_remaining < DEADLINE_SLACK_S
