"""Calling a stub method, blocking or asyncio: failures become `ServerError`, and a server stream that
the caller leaves early is cancelled at once (so the server stops producing for nobody)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc

from gonka.mlnode.client.connection import Metadata
from gonka.mlnode.client.errors import ServerError


def unary(method: Any, request: Any, metadata: Metadata | None, timeout: float | None = None) -> Any:
    try:
        return method(request, metadata=metadata, timeout=timeout)
    except grpc.RpcError as error:
        raise ServerError.from_rpc_error(error) from None


async def unary_async(method: Any, request: Any, metadata: Metadata | None, timeout: float | None = None) -> Any:
    try:
        return await method(request, metadata=metadata, timeout=timeout)
    except grpc.RpcError as error:
        raise ServerError.from_rpc_error(error) from None


def streamed(method: Any, request: Any, metadata: Metadata | None, timeout: float | None = None) -> Iterator[Any]:
    call = method(request, metadata=metadata, timeout=timeout)
    try:
        yield from call
    except grpc.RpcError as error:
        raise ServerError.from_rpc_error(error) from None
    finally:
        call.cancel()


async def streamed_async(
    method: Any, request: Any, metadata: Metadata | None, timeout: float | None = None
) -> AsyncIterator[Any]:
    call = method(request, metadata=metadata, timeout=timeout)
    try:
        async for response in call:
            yield response
    except grpc.RpcError as error:
        raise ServerError.from_rpc_error(error) from None
    finally:
        call.cancel()
