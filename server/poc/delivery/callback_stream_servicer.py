"""mlnode.poc.v1.PoCCallbackStream over the pull stream's buffer (server.poc.delivery.callback_stream), and the plaintext
listener that serves it alone (--callback-stream-port) where the gRPC port cannot: the API node dials it without TLS
and without a token."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import grpc

from mlnode.poc.v1 import poc_callback_stream_pb2 as stream_pb2
from mlnode.poc.v1 import poc_callback_stream_pb2_grpc as stream_grpc
from server.poc.delivery.callback_stream import CallbackBuffer, StreamEnd

log = logging.getLogger(__name__)

SERVICE_NAME = stream_pb2.DESCRIPTOR.services_by_name["PoCCallbackStream"].full_name
# A stream ended by a newer consumer, or by the shutdown: the consumer reconnects (to the newer one's buffer state).
END_CODES = {StreamEnd.TAKEN_OVER: grpc.StatusCode.ABORTED, StreamEnd.CLOSED: grpc.StatusCode.UNAVAILABLE}


class CallbackStreamServicer(stream_grpc.PoCCallbackStreamServicer):
    def __init__(self, buffer: CallbackBuffer) -> None:
        self._buffer = buffer

    async def StreamCallbacks(  # the proto names it so
        self, request: stream_pb2.StreamCallbacksRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[stream_pb2.Callback]:
        consumer = self._buffer.open_stream(request.resume_after_id)
        log.info("pull stream: a consumer connected (resume_after_id %r)", request.resume_after_id[:64])
        async for callback in consumer.callbacks():
            yield stream_pb2.Callback(id=callback.id, path=callback.path, body=callback.body)
        if consumer.ended is not None:
            await context.abort(END_CODES[consumer.ended], consumer.ended.value)

    async def AckCallbacks(  # the proto names it so
        self, request: stream_pb2.AckCallbacksRequest, context: grpc.aio.ServicerContext
    ) -> stream_pb2.AckCallbacksResponse:
        self._buffer.ack(request.ids)
        return stream_pb2.AckCallbacksResponse()


def add_callback_stream(server: grpc.aio.Server, buffer: CallbackBuffer) -> None:
    stream_grpc.add_PoCCallbackStreamServicer_to_server(CallbackStreamServicer(buffer), server)


class CallbackStreamListener:
    """The stream alone on a plaintext port of its own (--callback-stream-port)."""

    def __init__(self, buffer: CallbackBuffer, address: str) -> None:
        self.address = address
        self._server = grpc.aio.server(options=(("grpc.so_reuseport", 0),))
        add_callback_stream(self._server, buffer)

    async def start(self) -> None:
        """Raises RuntimeError when the address cannot be bound."""
        self._server.add_insecure_port(self.address)
        await self._server.start()
        log.info("pull callback stream %s on %s (plaintext)", SERVICE_NAME, self.address)

    async def stop(self, grace_seconds: float) -> None:
        await self._server.stop(grace=grace_seconds)
