"""Clients for gonka.mlnode.v1.InferenceService: asyncio (`AsyncInferenceClient`) and blocking
(`InferenceClient`). Failed calls raise `ServerError` with the server's reason and field.

Plaintext by default; `tls=TlsConfig(...)` for TLS or mutual TLS. `auth_token` is sent on every call
as `authorization: Bearer <token>`, which the server's control RPCs require when it has a token."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from gonka.mlnode.client.calls import streamed, streamed_async, unary, unary_async
from gonka.mlnode.client.connection import TlsConfig, auth_metadata, channel_arguments
from gonka.mlnode.client.poc import AsyncPocClient, PocClient
from gonka.mlnode.client.requests import build_request
from gonka.mlnode.client.results import Generation
from gonka.mlnode.v1 import inference_pb2 as pb
from gonka.mlnode.v1 import inference_pb2_grpc as pb_grpc
from gonka.mlnode.v1 import validation_pb2 as vpb
from gonka.mlnode.v1 import validation_pb2_grpc as vpb_grpc

DEFAULT_TARGET = "127.0.0.1:50051"


def _as_request(request: pb.GenerateRequest | None, kwargs: dict[str, Any]) -> pb.GenerateRequest:
    if request is not None and kwargs:
        raise TypeError("pass either a GenerateRequest or keyword arguments, not both")
    return request if request is not None else build_request(**kwargs)


def _check_channel_source(channel: object, tls: TlsConfig | None) -> None:
    if channel is not None and tls is not None:
        raise TypeError("pass either a channel or tls, not both: a given channel keeps its own credentials")


def _open_channel(grpc_module: Any, target: str, tls: TlsConfig | None) -> Any:
    """`grpc_module`: grpc (blocking) or grpc.aio; both name their channel constructors alike."""
    options = channel_arguments(tls)
    if tls is None:
        return grpc_module.insecure_channel(target, options=options)
    return grpc_module.secure_channel(target, tls.channel_credentials(), options=options)


class AsyncInferenceClient:
    def __init__(
        self,
        target: str = DEFAULT_TARGET,
        channel: grpc.aio.Channel | None = None,
        *,
        tls: TlsConfig | None = None,
        auth_token: str | None = None,
    ) -> None:
        _check_channel_source(channel, tls)
        self._channel = channel or _open_channel(grpc.aio, target, tls)
        self._metadata = auth_metadata(auth_token)
        self._stub = pb_grpc.InferenceServiceStub(self._channel)
        self._validation = vpb_grpc.ValidationServiceStub(self._channel)
        self._health = health_pb2_grpc.HealthStub(self._channel)
        # PocService and ValidatePocArtifacts on this channel, with this token.
        self.poc = AsyncPocClient(self._channel, self._metadata)

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
        async for response in streamed_async(
            self._stub.Generate, _as_request(request, kwargs), self._metadata, timeout
        ):
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
        request = vpb.ValidateInferenceRequest(items=items)
        async for response in streamed_async(self._validation.ValidateInference, request, self._metadata, timeout):
            yield response

    async def abort(self, request_id: str) -> pb.AbortResponse:
        return await unary_async(self._stub.Abort, pb.AbortRequest(request_id=request_id), self._metadata)

    async def model_info(self) -> pb.GetModelInfoResponse:
        return await unary_async(self._stub.GetModelInfo, pb.GetModelInfoRequest(), self._metadata)

    async def server_status(self, include_engine_processes: bool = False) -> pb.GetServerStatusResponse:
        request = pb.GetServerStatusRequest(include_engine_processes=include_engine_processes)
        return await unary_async(self._stub.GetServerStatus, request, self._metadata)

    async def health(self, service: str = "") -> int:
        """The grpc.health.v1 status of `service` ("" for the server as a whole)."""
        response = await unary_async(self._health.Check, health_pb2.HealthCheckRequest(service=service), self._metadata)
        return response.status


class InferenceClient:
    def __init__(
        self,
        target: str = DEFAULT_TARGET,
        channel: grpc.Channel | None = None,
        *,
        tls: TlsConfig | None = None,
        auth_token: str | None = None,
    ) -> None:
        _check_channel_source(channel, tls)
        self._channel = channel or _open_channel(grpc, target, tls)
        self._metadata = auth_metadata(auth_token)
        self._stub = pb_grpc.InferenceServiceStub(self._channel)
        self._validation = vpb_grpc.ValidationServiceStub(self._channel)
        self._health = health_pb2_grpc.HealthStub(self._channel)
        # PocService and ValidatePocArtifacts on this channel, with this token.
        self.poc = PocClient(self._channel, self._metadata)

    def __enter__(self) -> "InferenceClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._channel.close()

    def stream(
        self, request: pb.GenerateRequest | None = None, *, timeout: float | None = None, **kwargs: Any
    ) -> Iterator[pb.GenerateResponse]:
        """Yields the server's messages as they arrive. Leaving the loop early cancels the call."""
        yield from streamed(self._stub.Generate, _as_request(request, kwargs), self._metadata, timeout)

    def generate(
        self, request: pb.GenerateRequest | None = None, *, timeout: float | None = None, **kwargs: Any
    ) -> Generation:
        generation = Generation()
        for response in self.stream(request, timeout=timeout, **kwargs):
            generation.add(response)
        return generation

    def validate_inference(
        self, items: list[vpb.InferenceItem], *, timeout: float | None = None
    ) -> list[vpb.ValidateInferenceResponse]:
        """The server's verdicts, one per item, in the order they completed."""
        return list(self.stream_validate_inference(items, timeout=timeout))

    def stream_validate_inference(
        self, items: list[vpb.InferenceItem], *, timeout: float | None = None
    ) -> Iterator[vpb.ValidateInferenceResponse]:
        """validate_inference's verdicts as they complete (each tagged with its item's index), for a
        caller that reports progress. Leaving the loop early cancels the call."""
        request = vpb.ValidateInferenceRequest(items=items)
        yield from streamed(self._validation.ValidateInference, request, self._metadata, timeout)

    def abort(self, request_id: str) -> pb.AbortResponse:
        return unary(self._stub.Abort, pb.AbortRequest(request_id=request_id), self._metadata)

    def model_info(self) -> pb.GetModelInfoResponse:
        return unary(self._stub.GetModelInfo, pb.GetModelInfoRequest(), self._metadata)

    def server_status(self, include_engine_processes: bool = False) -> pb.GetServerStatusResponse:
        request = pb.GetServerStatusRequest(include_engine_processes=include_engine_processes)
        return unary(self._stub.GetServerStatus, request, self._metadata)

    def health(self, service: str = "") -> int:
        return unary(self._health.Check, health_pb2.HealthCheckRequest(service=service), self._metadata).status
