"""Clients for gonka.mlnode.v1.InferenceService: asyncio (`AsyncInferenceClient`) and blocking
(`InferenceClient`). Failed calls raise `ServerError` with the server's reason and field."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from gonka.mlnode.client.errors import ServerError
from gonka.mlnode.client.requests import build_request
from gonka.mlnode.client.results import Generation
from gonka.mlnode.v1 import inference_pb2 as pb
from gonka.mlnode.v1 import inference_pb2_grpc as pb_grpc
from gonka.mlnode.v1 import validation_pb2 as vpb
from gonka.mlnode.v1 import validation_pb2_grpc as vpb_grpc

DEFAULT_TARGET = "127.0.0.1:50051"
CHANNEL_OPTIONS = (
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
)


def _as_request(request: pb.GenerateRequest | None, kwargs: dict[str, Any]) -> pb.GenerateRequest:
    if request is not None and kwargs:
        raise TypeError("pass either a GenerateRequest or keyword arguments, not both")
    return request if request is not None else build_request(**kwargs)


async def _streamed(call: Any) -> AsyncIterator[Any]:
    """A server-streaming call's messages; its failure as ServerError; cancelled when left early."""
    try:
        async for response in call:
            yield response
    except grpc.RpcError as error:
        raise ServerError.from_rpc_error(error) from None
    finally:
        call.cancel()


class AsyncInferenceClient:
    def __init__(self, target: str = DEFAULT_TARGET, channel: grpc.aio.Channel | None = None) -> None:
        self._channel = channel or grpc.aio.insecure_channel(target, options=CHANNEL_OPTIONS)
        self._stub = pb_grpc.InferenceServiceStub(self._channel)
        self._validation = vpb_grpc.ValidationServiceStub(self._channel)
        self._health = health_pb2_grpc.HealthStub(self._channel)

    async def __aenter__(self) -> "AsyncInferenceClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._channel.close()

    async def stream(
        self, request: pb.GenerateRequest | None = None, *, timeout: float | None = None, **kwargs: Any
    ) -> AsyncIterator[pb.GenerateResponse]:
        """Yields the server's messages as they arrive. Leaving the loop early cancels the call."""
        async for response in _streamed(self._stub.Generate(_as_request(request, kwargs), timeout=timeout)):
            yield response

    async def generate(
        self, request: pb.GenerateRequest | None = None, *, timeout: float | None = None, **kwargs: Any
    ) -> Generation:
        generation = Generation()
        async for response in self.stream(request, timeout=timeout, **kwargs):
            generation.add(response)
        return generation

    async def validate_inference(
        self, items: list[vpb.InferenceItem], *, timeout: float | None = None
    ) -> AsyncIterator[vpb.ValidateInferenceResponse]:
        """The server's verdicts, one per item, as they complete (each tagged with its item's index)."""
        async for response in _streamed(self._validation.ValidateInference(vpb.ValidateInferenceRequest(items=items), timeout=timeout)):
            yield response

    async def abort(self, request_id: str) -> None:
        await self._unary(self._stub.Abort, pb.AbortRequest(request_id=request_id))

    async def model_info(self) -> pb.GetModelInfoResponse:
        return await self._unary(self._stub.GetModelInfo, pb.GetModelInfoRequest())

    async def server_status(self, include_engine_processes: bool = False) -> pb.GetServerStatusResponse:
        request = pb.GetServerStatusRequest(include_engine_processes=include_engine_processes)
        return await self._unary(self._stub.GetServerStatus, request)

    async def health(self, service: str = "") -> int:
        """The grpc.health.v1 status of `service` ("" for the server as a whole)."""
        response = await self._unary(self._health.Check, health_pb2.HealthCheckRequest(service=service))
        return response.status

    async def _unary(self, method: Any, request: Any) -> Any:
        try:
            return await method(request)
        except grpc.RpcError as error:
            raise ServerError.from_rpc_error(error) from None


class InferenceClient:
    def __init__(self, target: str = DEFAULT_TARGET, channel: grpc.Channel | None = None) -> None:
        self._channel = channel or grpc.insecure_channel(target, options=CHANNEL_OPTIONS)
        self._stub = pb_grpc.InferenceServiceStub(self._channel)
        self._validation = vpb_grpc.ValidationServiceStub(self._channel)
        self._health = health_pb2_grpc.HealthStub(self._channel)

    def __enter__(self) -> "InferenceClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._channel.close()

    def stream(
        self, request: pb.GenerateRequest | None = None, *, timeout: float | None = None, **kwargs: Any
    ) -> Iterator[pb.GenerateResponse]:
        call = self._stub.Generate(_as_request(request, kwargs), timeout=timeout)
        try:
            yield from call
        except grpc.RpcError as error:
            raise ServerError.from_rpc_error(error) from None
        finally:
            call.cancel()

    def generate(
        self, request: pb.GenerateRequest | None = None, *, timeout: float | None = None, **kwargs: Any
    ) -> Generation:
        generation = Generation()
        for response in self.stream(request, timeout=timeout, **kwargs):
            generation.add(response)
        return generation

    def validate_inference(self, items: list[vpb.InferenceItem], *, timeout: float | None = None) -> list[vpb.ValidateInferenceResponse]:
        """The server's verdicts, one per item, in the order they completed."""
        try:
            return list(self._validation.ValidateInference(vpb.ValidateInferenceRequest(items=items), timeout=timeout))
        except grpc.RpcError as error:
            raise ServerError.from_rpc_error(error) from None

    def abort(self, request_id: str) -> None:
        self._unary(self._stub.Abort, pb.AbortRequest(request_id=request_id))

    def model_info(self) -> pb.GetModelInfoResponse:
        return self._unary(self._stub.GetModelInfo, pb.GetModelInfoRequest())

    def server_status(self, include_engine_processes: bool = False) -> pb.GetServerStatusResponse:
        request = pb.GetServerStatusRequest(include_engine_processes=include_engine_processes)
        return self._unary(self._stub.GetServerStatus, request)

    def health(self, service: str = "") -> int:
        return self._unary(self._health.Check, health_pb2.HealthCheckRequest(service=service)).status

    def _unary(self, method: Any, request: Any) -> Any:
        try:
            return method(request)
        except grpc.RpcError as error:
            raise ServerError.from_rpc_error(error) from None
