"""The concurrent-stream bound and keepalive enforcement, against a real server with small settings.

Quiet streams are genuine: `coalesce_ms` makes the server hold a stream's tokens after its first
message, so nothing but pings crosses the connection for QUIET_SECONDS. The server pings every
second (--keepalive-time 1) and allows a client ping every 3 s while it sends nothing.
gRPC clients never ping more often than once a second without data (a fixed throttle in gRPC
core), hence an interval above a second to exceed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2

from gonka.mlnode.client import AsyncInferenceClient, ServerError, build_request
from gonka.mlnode.v1 import validation_pb2 as vpb
from tests.support.server_process import SERVER_LAYER_FLAGS, ServerProcess, start_server

MAX_STREAMS = 2
KEEPALIVE_SECONDS = 1
MIN_PING_INTERVAL_SECONDS = 3
QUIET_SECONDS = 10
# A gap this close to QUIET_SECONDS means the stream really was silent for many keepalive and ping intervals; the
# margin absorbs a client that reads the first message late on a loaded machine.
QUIET_TOLERANCE_SECONDS = 2
PROMPT = [9707, 1879, 11]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, model_dir: Path) -> Iterator[ServerProcess]:
    flags = [
        "--max-concurrent-streams",
        str(MAX_STREAMS),
        "--keepalive-time",
        str(KEEPALIVE_SECONDS),
        "--keepalive-timeout",
        "5",
        "--keepalive-min-ping-interval",
        str(MIN_PING_INTERVAL_SECONDS),
        *SERVER_LAYER_FLAGS,
    ]
    process = start_server(tmp_path_factory.mktemp("limits") / "server.log", flags)
    yield process
    exit_code = process.stop()
    assert exit_code == 0, f"server exited with {exit_code}:\n{process.log_tail()}"


def quiet_request(**kwargs: object):
    # One message after the first step, the rest QUIET_SECONDS later (ignore_eos: never done early).
    return build_request(
        token_ids=PROMPT, max_tokens=8, temperature=0, ignore_eos=True, coalesce_ms=QUIET_SECONDS * 1000, **kwargs
    )


def pinging_client(target: str, ping_every_ms: int) -> AsyncInferenceClient:
    options = (
        ("grpc.keepalive_time_ms", ping_every_ms),
        ("grpc.keepalive_timeout_ms", 5000),
        # Without this a client stops pinging after two pings on a connection it sends no data on.
        ("grpc.http2.max_pings_without_data", 0),
        ("grpc.keepalive_permit_without_calls", 1),
    )
    return AsyncInferenceClient(channel=grpc.aio.insecure_channel(target, options=options))


async def arrival_times(client: AsyncInferenceClient) -> list[float]:
    """Seconds from the call to each message; a finished stream's last message carries `finish`."""
    started, times = time.monotonic(), []
    async for message in client.stream(quiet_request()):
        times.append(time.monotonic() - started)
        last = message
    assert last.HasField("finish")
    return times


async def active_streams_drop_to(client: AsyncInferenceClient, count: int) -> None:
    for _ in range(100):
        if (await client.server_status()).active_streams == count:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"active streams did not drop to {count}")


def test_quiet_streams_outlive_many_keepalive_intervals(server: ServerProcess) -> None:
    async def scenario() -> tuple[list[float], list[float]]:
        # One client never pings (it only answers the server's pings); one pings at an allowed rate.
        async with (
            AsyncInferenceClient(server.target) as silent,
            pinging_client(server.target, (MIN_PING_INTERVAL_SECONDS + 1) * 1000) as polite,
        ):
            return await asyncio.gather(arrival_times(silent), arrival_times(polite))

    for times in asyncio.run(scenario()):
        assert len(times) >= 2
        assert times[-1] - times[0] >= QUIET_SECONDS - QUIET_TOLERANCE_SECONDS, times


def test_a_client_that_pings_too_often_gets_goaway(server: ServerProcess) -> None:
    async def scenario() -> tuple[ServerError, float, int]:
        async with pinging_client(server.target, 200) as eager:
            started = time.monotonic()
            with pytest.raises(ServerError) as failed:
                await arrival_times(eager)
            elapsed = time.monotonic() - started
        # The server itself is fine: a new connection is served.
        async with AsyncInferenceClient(server.target) as fresh:
            return failed.value, elapsed, await fresh.health()

    error, elapsed, health = asyncio.run(scenario())
    # GOAWAY with ENHANCE_YOUR_CALM "too_many_pings", as gRPC's client reports it.
    assert error.code == grpc.StatusCode.UNAVAILABLE and "Too many pings" in error.message
    assert elapsed < QUIET_SECONDS  # ended by the GOAWAY, not by the stream's own end
    assert health == health_pb2.HealthCheckResponse.SERVING


def test_streams_beyond_the_bound_are_refused_before_the_engine_sees_them(server: ServerProcess) -> None:
    async def scenario() -> None:
        async with AsyncInferenceClient(server.target) as client:
            await active_streams_drop_to(client, 0)  # earlier tests' streams are gone
            held = [client.stream(quiet_request()) for _ in range(MAX_STREAMS)]
            for stream in held:
                await stream.__anext__()  # admitted and running

            with pytest.raises(ServerError) as refused:
                await client.generate(token_ids=PROMPT, max_tokens=2, request_id="over-the-bound")
            error = refused.value
            assert (error.code, error.reason, error.retry_after_seconds) == (
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                "TOO_MANY_STREAMS",
                1.0,
            )
            with pytest.raises(ServerError) as refused_validation:
                async for _ in client.validate_inference([vpb.InferenceItem()]):
                    pass
            assert refused_validation.value.reason == "TOO_MANY_STREAMS"

            # Control and status calls are not streams: they still answer. The refused request was
            # never registered, so it cannot be aborted.
            assert (await client.server_status()).active_streams == MAX_STREAMS
            assert (await client.model_info()).vocab_size > 0
            with pytest.raises(ServerError) as unknown:
                await client.abort("over-the-bound")
            assert unknown.value.reason == "REQUEST_NOT_FOUND"

            await held[0].aclose()  # cancels that call: its slot comes back
            await active_streams_drop_to(client, MAX_STREAMS - 1)
            assert len((await client.generate(token_ids=PROMPT, max_tokens=2)).first.token_ids) == 2
            await held[1].aclose()

    asyncio.run(scenario())
