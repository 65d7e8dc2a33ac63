"""Server reflection (what grpcurl and other tools use to list and describe services)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

import grpc
from google.protobuf import descriptor_pool
from google.protobuf.descriptor import FileDescriptor
from grpc_reflection.v1alpha import reflection


class MethodAwarePool:
    """The default descriptor pool, plus method symbols.

    protobuf's upb pool cannot find the file of `package.Service.Method`, which is exactly what
    `grpcurl describe package.Service.Method` asks for; everything else is delegated unchanged.
    """

    def __init__(self, pool: descriptor_pool.DescriptorPool) -> None:
        self._pool = pool

    def FindFileContainingSymbol(self, symbol: str) -> FileDescriptor:  # the pool's API names it so
        try:
            return self._pool.FindFileContainingSymbol(symbol)
        except KeyError:
            service_name, _, method = symbol.rpartition(".")
            if not service_name:
                raise
            service = self._pool.FindServiceByName(service_name)
            if method not in service.methods_by_name:
                raise
            return service.file

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pool, name)


def enable_reflection(server: grpc.aio.Server, service_names: Iterable[str]) -> None:
    names = (*service_names, reflection.SERVICE_NAME)
    # A stand-in for the pool (it delegates everything but one lookup), which reflection only calls methods of.
    pool = cast(descriptor_pool.DescriptorPool, MethodAwarePool(descriptor_pool.Default()))
    reflection.enable_server_reflection(names, server, pool=pool)
