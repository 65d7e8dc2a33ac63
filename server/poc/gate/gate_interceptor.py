"""The gRPC side of the priority gate: while a mining round runs, new inference RPCs fail before any
response message with UNAVAILABLE, reason POC_IN_PROGRESS, RetryInfo and grpc-retry-pushback-ms."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection
from typing import Any

import grpc

from server.core.refusing_handler import refusing_handler
from server.poc.gate.priority_gate import PriorityGate


class GateInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, gate: PriorityGate, gated_methods: Collection[str]) -> None:
        """`gated_methods`: full method paths, as `/package.Service/Method`."""
        self._gate = gate
        self._gated = frozenset(gated_methods)

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any] | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        handler = await continuation(handler_call_details)
        if handler is None or not self._gate.closed or handler_call_details.method not in self._gated:
            return handler
        return refusing_handler(handler, self._gate.refusal())
