"""Proof of Compute: gonka.mlnode.v1.PocService (mining rounds, artifact subscriptions, artifacts of
explicit nonces) and ValidationService.ValidatePocArtifacts, blocking (`PocClient`) and asyncio
(`AsyncPocClient`).

Each rides an inference client's channel, TLS and token: `InferenceClient(...).poc` and
`AsyncInferenceClient(...).poc`. With a server token, every call here needs it.

    with InferenceClient("127.0.0.1:50051") as client:
        model = client.model_info().served_model_name
        client.poc.start_round(block_hash="...", public_key="...", model=model, seq_len=1024)
        try:
            for event in client.poc.follow_artifacts():
                ...
        finally:
            client.poc.stop_round()
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterable, Iterator
from contextlib import aclosing, closing
from typing import Any

import grpc

from gonka.mlnode.client.calls import streamed, streamed_async, unary, unary_async
from gonka.mlnode.client.connection import Metadata
from gonka.mlnode.client.errors import ServerError
from gonka.mlnode.client.poc_requests import Claim, compute_artifacts_request, start_round_request, validate_poc_request
from gonka.mlnode.client.subscription import RetryHook, SubscriptionCursor, ended_without_end
from gonka.mlnode.v1 import poc_pb2
from gonka.mlnode.v1 import poc_pb2_grpc
from gonka.mlnode.v1 import validation_pb2 as vpb
from gonka.mlnode.v1 import validation_pb2_grpc as vpb_grpc

# The name grpc.health.v1 knows the service by: `client.health(POC_SERVICE)`.
POC_SERVICE = poc_pb2.DESCRIPTOR.services_by_name["PocService"].full_name
DEFAULT_MAX_RETRIES = 5
DEFAULT_RETRY_DELAY_SECONDS = 0.5


class PocClient:
    def __init__(self, channel: grpc.Channel, metadata: Metadata | None = None) -> None:
        self._metadata = metadata
        self._poc = poc_pb2_grpc.PocServiceStub(channel)
        self._validation = vpb_grpc.ValidationServiceStub(channel)

    def start_round(self, *, timeout: float | None = None, **parameters: Any) -> poc_pb2.RoundStatus:
        """Keyword arguments: those of `poc_requests.start_round_request` (block_hash, public_key,
        model, seq_len required). Returns as soon as the round runs."""
        request = start_round_request(**parameters)
        return unary(self._poc.StartRound, request, self._metadata, timeout).status

    def stop_round(self, round_id: str | None = None, *, timeout: float | None = None) -> poc_pb2.RoundStatus:
        """Stops the running round (or the one named); returns once inference is open again."""
        return unary(
            self._poc.StopRound, poc_pb2.StopRoundRequest(round_id=round_id or ""), self._metadata, timeout
        ).status

    def round_status(self, round_id: str | None = None, *, timeout: float | None = None) -> poc_pb2.RoundStatus:
        """The running round's status, or the named one's, or else the most recent one's."""
        request = poc_pb2.GetRoundStatusRequest(round_id=round_id or "")
        return unary(self._poc.GetRoundStatus, request, self._metadata, timeout).status

    def subscribe_artifacts(
        self, round_id: str | None = None, after_sequence: int = 0, *, timeout: float | None = None
    ) -> Iterator[poc_pb2.SubscribeArtifactsResponse]:
        """One subscription: batches after `after_sequence`, ArtifactsLost where the buffer no longer
        holds what was asked for, and a final SubscriptionEnd. A dropped connection raises."""
        request = poc_pb2.SubscribeArtifactsRequest(round_id=round_id or "", after_sequence=after_sequence)
        yield from streamed(self._poc.SubscribeArtifacts, request, self._metadata, timeout)

    def follow_artifacts(
        self,
        round_id: str | None = None,
        after_sequence: int = 0,
        *,
        max_retries: int = DEFAULT_MAX_RETRIES,
        retry_delay: float = DEFAULT_RETRY_DELAY_SECONDS,
        on_retry: RetryHook | None = None,
    ) -> Iterator[poc_pb2.SubscribeArtifactsResponse]:
        """Like subscribe_artifacts until the SubscriptionEnd, but a dropped connection is resumed
        from the last sequence received, on the same round, up to `max_retries` times in a row
        (`retry_delay` x attempt seconds apart). The server's own errors are raised at once."""
        cursor = SubscriptionCursor(round_id, after_sequence, max_retries, retry_delay, on_retry)
        while True:
            try:
                with closing(self.subscribe_artifacts(cursor.round_id, cursor.after_sequence)) as responses:
                    for response in responses:
                        cursor.saw(response)
                        yield response
                        if response.HasField("end"):
                            return
                error = ended_without_end()
            except ServerError as caught:
                error = caught
            time.sleep(cursor.retry_delay(error))

    def compute_artifacts(
        self,
        block_hash: str,
        public_key: str,
        model: str,
        seq_len: int,
        nonces: Iterable[int],
        k_dim: int | None = None,
        batch_size: int | None = None,
        stronger_rng: bool = False,
        *,
        timeout: float | None = None,
    ) -> Iterator[poc_pb2.ArtifactBatch]:
        """The artifacts of `nonces` (any order, duplicates allowed), batch by batch."""
        request = compute_artifacts_request(
            block_hash=block_hash,
            public_key=public_key,
            model=model,
            seq_len=seq_len,
            nonces=nonces,
            k_dim=k_dim,
            batch_size=batch_size,
            stronger_rng=stronger_rng,
        )
        for response in streamed(self._poc.ComputeArtifacts, request, self._metadata, timeout):
            yield response.batch

    def validate_poc_artifacts(
        self, *, claims: Iterable[Claim], timeout: float | None = None, **parameters: Any
    ) -> Iterator[vpb.ValidatePocArtifactsResponse]:
        """`claims`: (nonce, vector) pairs, the vector as the network's base64 str or its float16
        bytes. Other keyword arguments: those of `poc_requests.validate_poc_request` (the three
        stat-test thresholds are required). Yields one progress message per batch, then the summary."""
        request = validate_poc_request(claims=claims, **parameters)
        yield from streamed(self._validation.ValidatePocArtifacts, request, self._metadata, timeout)


class AsyncPocClient:
    def __init__(self, channel: grpc.aio.Channel, metadata: Metadata | None = None) -> None:
        self._metadata = metadata
        self._poc = poc_pb2_grpc.PocServiceStub(channel)
        self._validation = vpb_grpc.ValidationServiceStub(channel)

    async def start_round(self, *, timeout: float | None = None, **parameters: Any) -> poc_pb2.RoundStatus:
        request = start_round_request(**parameters)
        return (await unary_async(self._poc.StartRound, request, self._metadata, timeout)).status

    async def stop_round(self, round_id: str | None = None, *, timeout: float | None = None) -> poc_pb2.RoundStatus:
        request = poc_pb2.StopRoundRequest(round_id=round_id or "")
        return (await unary_async(self._poc.StopRound, request, self._metadata, timeout)).status

    async def round_status(self, round_id: str | None = None, *, timeout: float | None = None) -> poc_pb2.RoundStatus:
        request = poc_pb2.GetRoundStatusRequest(round_id=round_id or "")
        return (await unary_async(self._poc.GetRoundStatus, request, self._metadata, timeout)).status

    async def subscribe_artifacts(
        self, round_id: str | None = None, after_sequence: int = 0, *, timeout: float | None = None
    ) -> AsyncIterator[poc_pb2.SubscribeArtifactsResponse]:
        request = poc_pb2.SubscribeArtifactsRequest(round_id=round_id or "", after_sequence=after_sequence)
        async for response in streamed_async(self._poc.SubscribeArtifacts, request, self._metadata, timeout):
            yield response

    async def follow_artifacts(
        self,
        round_id: str | None = None,
        after_sequence: int = 0,
        *,
        max_retries: int = DEFAULT_MAX_RETRIES,
        retry_delay: float = DEFAULT_RETRY_DELAY_SECONDS,
        on_retry: RetryHook | None = None,
    ) -> AsyncIterator[poc_pb2.SubscribeArtifactsResponse]:
        """PocClient.follow_artifacts, for asyncio."""
        cursor = SubscriptionCursor(round_id, after_sequence, max_retries, retry_delay, on_retry)
        while True:
            try:
                async with aclosing(self.subscribe_artifacts(cursor.round_id, cursor.after_sequence)) as responses:
                    async for response in responses:
                        cursor.saw(response)
                        yield response
                        if response.HasField("end"):
                            return
                error = ended_without_end()
            except ServerError as caught:
                error = caught
            await asyncio.sleep(cursor.retry_delay(error))

    async def compute_artifacts(
        self,
        block_hash: str,
        public_key: str,
        model: str,
        seq_len: int,
        nonces: Iterable[int],
        k_dim: int | None = None,
        batch_size: int | None = None,
        stronger_rng: bool = False,
        *,
        timeout: float | None = None,
    ) -> AsyncIterator[poc_pb2.ArtifactBatch]:
        request = compute_artifacts_request(
            block_hash=block_hash,
            public_key=public_key,
            model=model,
            seq_len=seq_len,
            nonces=nonces,
            k_dim=k_dim,
            batch_size=batch_size,
            stronger_rng=stronger_rng,
        )
        async for response in streamed_async(self._poc.ComputeArtifacts, request, self._metadata, timeout):
            yield response.batch

    async def validate_poc_artifacts(
        self, *, claims: Iterable[Claim], timeout: float | None = None, **parameters: Any
    ) -> AsyncIterator[vpb.ValidatePocArtifactsResponse]:
        request = validate_poc_request(claims=claims, **parameters)
        async for response in streamed_async(self._validation.ValidatePocArtifacts, request, self._metadata, timeout):
            yield response
