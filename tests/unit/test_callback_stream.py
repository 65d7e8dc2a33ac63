"""The pull stream mlnode.poc.v1.PoCCallbackStream (spec section 6): its buffer's every rule, the round sink that
feeds it, the vendored proto's wire shape, and the servicer over a real grpc.aio server on 127.0.0.1 with the
generated Python client."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
import numpy as np
import pytest
from google.protobuf import descriptor_pb2

from engine_ext.consensus.artifact import decode_vector, encoding_metadata
from mlnode.poc.v1 import poc_callback_stream_pb2 as stream_pb2
from mlnode.poc.v1 import poc_callback_stream_pb2_grpc as stream_grpc
from server.listen_port import PortUnavailable, require_port_free
from server.options import ServerOptions, parse_server_flags
from server.poc.delivery.callback_stream import CallbackBuffer, StreamedCallback, StreamEnd, poc_batches_path
from server.poc.delivery.callback_stream_servicer import CallbackStreamListener
from server.poc.delivery.callbacks import CallbackIdentity, StreamedArtifacts

GUARD_SECONDS = 10  # only a hang guard: every wait below ends on an event long before this
QUIET_SECONDS = 0.2  # how long a stream must stay silent to show it has nothing more to send
PATH = "/v2/poc-batches/m/generated"
K = 12


def run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(test(), GUARD_SECONDS))


async def take(stream: AsyncIterator[StreamedCallback], count: int) -> list[StreamedCallback]:
    return [await anext(stream) for _ in range(count)]


async def next_of(stream: AsyncIterator[StreamedCallback]) -> StreamedCallback:
    return await anext(stream)


async def pending_read(stream: AsyncIterator[StreamedCallback]) -> asyncio.Task[StreamedCallback]:
    """A read of the stream that has found nothing to send after a while (it waits for a new callback)."""
    read = asyncio.create_task(next_of(stream))
    await asyncio.sleep(QUIET_SECONDS)
    assert not read.done(), f"the stream sent {read.result() if not read.exception() else read.exception()}"
    return read


def post(buffer: CallbackBuffer, *numbers: int) -> list[str]:
    return [buffer.post(PATH, {"n": number}) for number in numbers]


def numbers(callbacks: list[StreamedCallback]) -> list[int]:
    return [json.loads(callback.body)["n"] for callback in callbacks]


# Ids


def test_ids_are_the_boot_id_and_a_sequence_from_one() -> None:
    buffer = CallbackBuffer()
    assert re.fullmatch(r"[0-9a-f]{16}", buffer.boot_id)
    assert post(buffer, 10, 11, 12) == [f"{buffer.boot_id}-1", f"{buffer.boot_id}-2", f"{buffer.boot_id}-3"]
    assert CallbackBuffer().boot_id != buffer.boot_id  # random per process (per buffer: one a process)


def test_a_callback_carries_its_path_and_the_body_as_compact_json() -> None:
    async def scenario() -> None:
        buffer = CallbackBuffer()
        post(buffer, 7)
        (callback,) = await take(buffer.open_stream("").callbacks(), 1)
        assert (callback.path, callback.body) == (PATH, b'{"n":7}')

    run(scenario)


# StreamCallbacks


def test_a_stream_sends_the_buffered_callbacks_in_order_then_new_ones_as_they_come() -> None:
    async def scenario() -> None:
        buffer = CallbackBuffer()
        post(buffer, 1, 2, 3)
        stream = buffer.open_stream("").callbacks()
        assert numbers(await take(stream, 3)) == [1, 2, 3]
        read = await pending_read(stream)  # each once: nothing is sent again on the same stream
        post(buffer, 4, 5)
        assert numbers([await read, *await take(stream, 1)]) == [4, 5]

    run(scenario)


def test_resume_after_an_id_of_this_boot_drops_everything_up_to_it_as_acknowledged() -> None:
    async def scenario() -> None:
        buffer = CallbackBuffer()
        ids = post(buffer, 1, 2, 3, 4)
        stream = buffer.open_stream(ids[1]).callbacks()
        assert numbers(await take(stream, 2)) == [3, 4]
        (await pending_read(stream)).cancel()
        assert len(buffer) == 2  # 3 and 4 stay (unacknowledged)
        assert numbers(await take(buffer.open_stream("").callbacks(), 2)) == [3, 4]

    run(scenario)


@pytest.mark.parametrize("resume", ["", "0123456789abcdef-2", "not-an-id", "-2"])
def test_an_empty_or_foreign_resume_id_sends_everything_buffered(resume: str) -> None:
    async def scenario() -> None:
        buffer = CallbackBuffer(boot_id="fedcba9876543210")
        post(buffer, 1, 2, 3)
        assert numbers(await take(buffer.open_stream(resume).callbacks(), 3)) == [1, 2, 3]

    run(scenario)


def test_a_malformed_id_of_this_boot_drops_nothing() -> None:
    async def scenario() -> None:
        buffer = CallbackBuffer()
        post(buffer, 1, 2)
        assert numbers(await take(buffer.open_stream(f"{buffer.boot_id}-x").callbacks(), 2)) == [1, 2]

    run(scenario)


def test_a_new_stream_ends_the_earlier_one() -> None:
    async def scenario() -> None:
        buffer = CallbackBuffer()
        post(buffer, 1)
        first = buffer.open_stream("")
        first_stream = first.callbacks()
        assert numbers(await take(first_stream, 1)) == [1]
        waiting = await pending_read(first_stream)
        second = buffer.open_stream("")
        with pytest.raises(StopAsyncIteration):
            await waiting
        assert first.ended is StreamEnd.TAKEN_OVER and second.ended is None
        post(buffer, 2)
        assert numbers(await take(second.callbacks(), 2)) == [1, 2]  # 1 was never acknowledged

    run(scenario)


# AckCallbacks and redelivery


def test_acknowledged_callbacks_go_and_the_others_are_redelivered_on_the_next_stream() -> None:
    async def scenario() -> None:
        buffer = CallbackBuffer()
        ids = post(buffer, 1, 2, 3, 4)
        await take(buffer.open_stream("").callbacks(), 4)
        assert buffer.ack([ids[0], ids[2]]) == 2
        assert numbers(await take(buffer.open_stream("").callbacks(), 2)) == [2, 4]
        assert len(buffer) == 2

    run(scenario)


def test_an_acknowledged_callback_not_yet_sent_is_not_sent() -> None:
    async def scenario() -> None:
        buffer = CallbackBuffer()
        ids = post(buffer, 1, 2, 3)
        stream = buffer.open_stream("").callbacks()
        assert numbers(await take(stream, 1)) == [1]
        buffer.ack([ids[1]])
        assert numbers(await take(stream, 1)) == [3]

    run(scenario)


def test_acknowledging_unknown_foreign_or_repeated_ids_changes_nothing() -> None:
    buffer = CallbackBuffer()
    ids = post(buffer, 1, 2)
    assert buffer.ack([ids[0]]) == 1
    assert buffer.ack([ids[0], "0123456789abcdef-2", f"{buffer.boot_id}-99", "", "junk"]) == 0
    assert len(buffer) == 1


# The bound


def test_beyond_the_bound_the_oldest_is_dropped_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> None:
        buffer = CallbackBuffer(capacity=3)
        with caplog.at_level(logging.WARNING, logger="server.poc.delivery.callback_stream"):
            ids = post(buffer, 1, 2, 3, 4, 5)
        assert buffer.dropped == 2 and len(buffer) == 3
        assert [record.levelno for record in caplog.records] == [logging.WARNING, logging.WARNING]
        assert ids[0] in caplog.records[0].getMessage()
        assert numbers(await take(buffer.open_stream("").callbacks(), 3)) == [3, 4, 5]

    run(scenario)


def test_the_default_bound_is_the_deployed_16384() -> None:
    buffer = CallbackBuffer()
    post(buffer, *range(16_385))
    assert len(buffer) == 16_384 and buffer.dropped == 1


# Shutdown


def test_close_ends_the_stream_and_any_later_one() -> None:
    async def scenario() -> None:
        buffer = CallbackBuffer()
        consumer = buffer.open_stream("")
        waiting = await pending_read(consumer.callbacks())
        buffer.close()
        with pytest.raises(StopAsyncIteration):
            await waiting
        assert consumer.ended is StreamEnd.CLOSED
        assert buffer.open_stream("").ended is StreamEnd.CLOSED

    run(scenario)


# The path and the round's sink


def test_the_path_escapes_the_model_twice_as_the_api_node_callback_url_does() -> None:
    # Go's url.PathEscape twice, as the API node builds {poc_callback_url}/v2/poc-batches/{model}.
    assert poc_batches_path("Qwen/Qwen3-235B-A22B-Instruct-2507-FP8", "generated") == (
        "/v2/poc-batches/Qwen%252FQwen3-235B-A22B-Instruct-2507-FP8/generated"
    )
    assert poc_batches_path("a b", "validated") == "/v2/poc-batches/a%2520b/validated"


def test_a_streamed_round_posts_each_batch_in_the_deployed_generated_body() -> None:
    async def scenario() -> None:
        buffer = CallbackBuffer()
        identity = CallbackIdentity(public_key="pk", block_hash="0xab", block_height=7, node_id=3)
        sink = StreamedArtifacts(buffer, "org/model", identity, K)
        vectors = np.arange(2 * K, dtype="<f2").reshape(2, K)
        sink.add([5, 9], vectors.tobytes())
        assert sink.counts() is None
        (callback,) = await take(buffer.open_stream("").callbacks(), 1)
        assert callback.path == "/v2/poc-batches/org%252Fmodel/generated"
        body: dict[str, Any] = json.loads(callback.body)
        assert {key: body[key] for key in ("public_key", "block_hash", "block_height", "node_id")} == {
            "public_key": "pk",
            "block_hash": "0xab",
            "block_height": 7,
            "node_id": 3,
        }
        assert body["encoding"] == encoding_metadata(K)
        assert [artifact["nonce"] for artifact in body["artifacts"]] == [5, 9]
        for row, artifact in enumerate(body["artifacts"]):
            np.testing.assert_array_equal(decode_vector(artifact["vector_b64"], K), vectors[row])

    run(scenario)


# The vendored proto, as the API node speaks it


def test_the_vendored_service_is_the_published_wire() -> None:
    service = stream_pb2.DESCRIPTOR.services_by_name["PoCCallbackStream"]
    assert service.full_name == "mlnode.poc.v1.PoCCallbackStream"
    methods = {
        method.name: (method.input_type.name, method.output_type.name, method.server_streaming)
        for method in service.methods
    }
    assert methods == {
        "StreamCallbacks": ("StreamCallbacksRequest", "Callback", True),
        "AckCallbacks": ("AckCallbacksRequest", "AckCallbacksResponse", False),
    }
    # As compiled (the FileDescriptorProto carries each field's label, whatever the protobuf runtime exposes).
    compiled = descriptor_pb2.FileDescriptorProto.FromString(stream_pb2.DESCRIPTOR.serialized_pb)
    assert compiled.package == "mlnode.poc.v1"
    fields = {
        message.name: [(f.name, f.number, f.type, f.label) for f in message.field] for message in compiled.message_type
    }
    string, data = descriptor_pb2.FieldDescriptorProto.TYPE_STRING, descriptor_pb2.FieldDescriptorProto.TYPE_BYTES
    optional, repeated = (
        descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL,
        descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED,
    )
    assert fields == {
        "StreamCallbacksRequest": [("resume_after_id", 1, string, optional)],
        "Callback": [("id", 1, string, optional), ("path", 2, string, optional), ("body", 3, data, optional)],
        "AckCallbacksRequest": [("ids", 1, string, repeated)],
        "AckCallbacksResponse": [],
    }


# The servicer, over gRPC


def test_the_service_streams_acknowledges_resumes_and_hands_over_over_grpc(unused_tcp_port: int) -> None:
    async def scenario() -> None:
        buffer = CallbackBuffer()
        listener = CallbackStreamListener(buffer, f"127.0.0.1:{unused_tcp_port}")
        await listener.start()
        try:
            async with grpc.aio.insecure_channel(listener.address) as channel:
                client = stream_grpc.PoCCallbackStreamStub(channel)
                ids = post(buffer, 1, 2, 3)
                first = client.StreamCallbacks(stream_pb2.StreamCallbacksRequest())
                received = [await first.read() for _ in range(3)]
                assert [message.id for message in received] == ids
                assert json.loads(received[0].body) == {"n": 1} and received[0].path == PATH
                await client.AckCallbacks(stream_pb2.AckCallbacksRequest(ids=[ids[0]]))
                post(buffer, 4)
                assert (await first.read()).id == f"{buffer.boot_id}-4"
                # A reconnect after the id of 2: 1 is acknowledged, 2 counts as acknowledged, 3 and 4 come again.
                second = client.StreamCallbacks(stream_pb2.StreamCallbacksRequest(resume_after_id=ids[1]))
                assert [(await second.read()).id for _ in range(2)] == [ids[2], f"{buffer.boot_id}-4"]
                with pytest.raises(grpc.aio.AioRpcError) as ended:
                    await first.read()
                assert ended.value.code() is grpc.StatusCode.ABORTED
                second.cancel()
        finally:
            await listener.stop(0)

    run(scenario)


@pytest.fixture
def unused_tcp_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# --callback-stream-port


def server_options(*argv: str) -> ServerOptions:
    return ServerOptions.from_args(parse_server_flags("python -m server", list(argv)))


def test_the_stream_port_is_off_unless_given_and_on_loopback_by_default() -> None:
    http = server_options("--host", "0.0.0.0", "--http-port", "8080").http
    assert http is not None and http.callback_stream_address is None
    http = server_options("--host", "0.0.0.0", "--http-port", "8080", "--callback-stream-port", "8090").http
    assert http is not None and http.callback_stream_address == "127.0.0.1:8090"
    given = ("--http-port", "8080", "--callback-stream-port", "8090", "--callback-stream-host", "::1")
    http = server_options(*given).http
    assert http is not None and http.callback_stream_address == "[::1]:8090"


def test_a_bound_stream_port_or_another_of_the_servers_ports_is_refused_before_the_engine_loads() -> None:
    with socket.socket() as occupant:
        occupant.bind(("127.0.0.1", 0))
        occupant.listen()
        taken = str(occupant.getsockname()[1])
        with pytest.raises(PortUnavailable, match=f"127.0.0.1:{taken} is already in use"):
            require_port_free(server_options("--port", "0", "--http-port", "9410", "--callback-stream-port", taken))
    for flags, name in (
        (("--port", "9411", "--http-port", "9412", "--callback-stream-port", "9411"), r"the gRPC port \(--port\)"),
        (
            ("--port", "0", "--http-port", "9412", "--callback-stream-port", "9412"),
            r"the management port \(--http-port\)",
        ),
        (
            ("--port", "0", "--http-port", "9412", "--metrics-port", "9413", "--callback-stream-port", "9413"),
            r"the metrics port \(--metrics-port\)",
        ),
        (
            ("--port", "0", "--http-port", "9412", "--callback-stream-port", "9414", "--inference-port", "9414"),
            r"the pull stream's port \(--callback-stream-port\)",
        ),
    ):
        with pytest.raises(PortUnavailable, match=f"port [0-9]+ is {name}"):
            require_port_free(server_options(*flags))
