"""Cancellation, deadlines, Abort and request ids: no engine request outlives its stream."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest

from gonka.mlnode.client import AsyncInferenceClient, InferenceClient, ServerError
from gonka.mlnode.v1 import inference_pb2 as pb

PROMPT_IDS = [9707, 1879, 11, 419, 374, 264, 1273]
LONG = dict(token_ids=PROMPT_IDS, max_tokens=4000, ignore_eos=True, temperature=0.0)


def wait_for_idle_engine(client: InferenceClient, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while True:
        status = client.server_status()
        idle = status.running_requests == 0 and status.waiting_requests == 0 and status.active_streams == 0
        if idle or time.monotonic() > deadline:
            return status
        time.sleep(0.1)


# Text-free streams take the token-stream path, streams with text vLLM's own generate(): both must clean up.
BOTH_PATHS = pytest.mark.parametrize("include_text", [False, True], ids=["token-stream", "vllm-generate"])


@BOTH_PATHS
def test_cancelled_streams_free_their_engine_requests(server, client: InferenceClient, include_text: bool) -> None:
    async def cancel_many() -> int:
        async with AsyncInferenceClient(server.target) as aio:

            async def read_two_then_leave(index: int) -> int:
                received = 0
                async for _ in aio.stream(**LONG, request_id=f"cancel-{index}", include_text=include_text):
                    received += 1
                    if received == 2:
                        break  # leaving the loop cancels the call
                return received

            return sum(await asyncio.gather(*(read_two_then_leave(i) for i in range(24))))

    assert asyncio.run(cancel_many()) == 48
    status = wait_for_idle_engine(client)
    assert (status.running_requests, status.waiting_requests, status.active_streams) == (0, 0, 0)
    assert status.kv_cache_usage == 0.0


def test_a_passed_deadline_frees_the_engine_request(client: InferenceClient) -> None:
    with pytest.raises(ServerError) as caught:
        client.generate(**LONG, timeout=1.5)
    assert caught.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
    status = wait_for_idle_engine(client)
    assert (status.running_requests, status.waiting_requests, status.active_streams) == (0, 0, 0)


@BOTH_PATHS
def test_abort_ends_the_stream_with_finish_reason_abort(server, client: InferenceClient, include_text: bool) -> None:
    async def scenario():
        async with AsyncInferenceClient(server.target) as aio:
            received = []
            async for response in aio.stream(**LONG, request_id="to-abort", include_text=include_text):
                received.append(response)
                if len(received) == 3:
                    await aio.abort("to-abort")
            return received

    received = asyncio.run(scenario())
    last = received[-1]
    assert last.HasField("finish") and last.finish.reason == pb.FINISH_REASON_ABORT
    assert 3 <= sum(len(r.tokens.ids) for r in received) < 4000
    status = wait_for_idle_engine(client)
    assert (status.running_requests, status.waiting_requests) == (0, 0)


def test_abort_of_an_unknown_request_is_not_found(client: InferenceClient) -> None:
    with pytest.raises(ServerError) as caught:
        client.abort("no-such-request")
    assert caught.value.code == grpc.StatusCode.NOT_FOUND and caught.value.reason == "REQUEST_NOT_FOUND"


def test_a_duplicate_active_request_id_is_refused(server, client: InferenceClient) -> None:
    async def scenario():
        async with AsyncInferenceClient(server.target) as aio:
            first = aio.stream(**LONG, request_id="twin")
            await first.__anext__()
            try:
                with pytest.raises(ServerError) as caught:
                    await aio.generate(token_ids=PROMPT_IDS, max_tokens=2, request_id="twin")
                return caught.value
            finally:
                await first.aclose()

    error = asyncio.run(scenario())
    assert error.code == grpc.StatusCode.ALREADY_EXISTS and error.reason == "DUPLICATE_REQUEST_ID"
    assert error.field == "request_id"
    wait_for_idle_engine(client)
    # Once the first is gone, the id is free again.
    assert client.generate(token_ids=PROMPT_IDS, max_tokens=2, request_id="twin").request_id == "twin"
