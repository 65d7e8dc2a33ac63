"""The server stays responsive while one request's CPU work runs, and says so when the engine is stuck.

One server of its own: a prompt bound large enough for a 10 MB text, and engine-call bounds short
enough to watch a stuck engine within seconds.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import threading
import time
from collections.abc import Iterator

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from gonka.mlnode.client import AsyncInferenceClient, InferenceClient, ServerError
from gonka.mlnode.v1 import inference_pb2 as pb
from tests.support.server_process import SERVER_LAYER_FLAGS, ServerProcess, start_server

HUGE_PROMPT_CHARS = 10_000_000
ENGINE_CALL_TIMEOUT_SECONDS = 1
ENGINE_STUCK_AFTER_SECONDS = 3
FLAGS = [
    "--max-prompt-chars",
    str(HUGE_PROMPT_CHARS),
    "--max-request-mb",
    "64",
    "--engine-call-timeout",
    str(ENGINE_CALL_TIMEOUT_SECONDS),
    "--engine-stuck-after",
    str(ENGINE_STUCK_AFTER_SECONDS),
    *SERVER_LAYER_FLAGS,
]
PROMPT_IDS = [9707, 1879, 11, 419, 374, 264, 1273]


@pytest.fixture(scope="module")
def liveness_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = start_server(tmp_path_factory.mktemp("liveness") / "server.log", FLAGS)
    yield process
    assert process.stop() == 0, process.log_tail()


def varied_text(chars: int, seed: int = 5) -> str:
    """Words of many shapes, so the tokenizer does real work (a repeated character would be cheap)."""
    rng = random.Random(seed)
    syllables = ["ka", "lo", "mi", "ne", "su", "tor", "vex", "qua", "rin", "do", "ph", "yth"]
    words = []
    total = 0
    while total < chars:
        word = "".join(rng.choice(syllables) for _ in range(rng.randint(1, 4))) + rng.choice(
            ["", ",", ".", str(rng.randint(0, 999))]
        )
        words.append(word)
        total += len(word) + 1
    return " ".join(words)[:chars]


def test_health_and_streams_keep_going_while_a_huge_prompt_is_tokenized(liveness_server: ServerProcess) -> None:
    text = varied_text(HUGE_PROMPT_CHARS)
    huge_result: dict[str, object] = {}

    def send_huge_prompt() -> None:
        started = time.monotonic()
        with InferenceClient(liveness_server.target) as client:
            try:
                client.generate(prompt=text, max_tokens=1, timeout=120)
            except ServerError as error:
                huge_result["error"] = error
        huge_result["seconds"] = time.monotonic() - started

    async def check_health_until_done(target: str, latencies: list[float]) -> None:
        async with grpc.aio.insecure_channel(target) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            while not huge_result:
                asked = time.monotonic()
                response = await health.Check(health_pb2.HealthCheckRequest(service=""), timeout=5.0)
                assert response.status == health_pb2.HealthCheckResponse.SERVING
                latencies.append(time.monotonic() - asked)
                await asyncio.sleep(0.25)

    async def scenario() -> tuple[list[float], float]:
        health_latencies: list[float] = []
        largest_gap = 0.0
        async with AsyncInferenceClient(liveness_server.target) as aio:
            stream = aio.stream(
                token_ids=PROMPT_IDS, max_tokens=8000, ignore_eos=True, temperature=0.0, request_id="beside-huge"
            )
            await stream.__anext__()
            sender = threading.Thread(target=send_huge_prompt)
            sender.start()
            checks = asyncio.create_task(check_health_until_done(liveness_server.target, health_latencies))
            last = time.monotonic()
            async for _ in stream:
                now = time.monotonic()
                largest_gap = max(largest_gap, now - last)
                last = now
                if huge_result:
                    break
            await checks
            sender.join()
        return health_latencies, largest_gap

    health_latencies, largest_gap = asyncio.run(asyncio.wait_for(scenario(), 180))
    error = huge_result["error"]
    assert isinstance(error, ServerError) and error.reason == "CONTEXT_LENGTH_EXCEEDED", error  # it was tokenized
    # The tokenization really took a while, and health was asked throughout.
    assert huge_result["seconds"] > 2 and len(health_latencies) >= 5, (huge_result, health_latencies)
    assert max(health_latencies) < 5.0, health_latencies
    assert largest_gap < 5.0, largest_gap


def engine_core_pid(client: InferenceClient) -> int:
    status = client.server_status(include_engine_processes=True)
    return next(process.pid for process in status.engine_processes if process.role == pb.EngineProcess.ROLE_ENGINE_CORE)


def wait_for_health(target: str, wanted: int, timeout: float) -> float:
    """Seconds until the server's health reports `wanted`."""
    started = time.monotonic()
    with grpc.insecure_channel(target) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        while time.monotonic() - started < timeout:
            if health.Check(health_pb2.HealthCheckRequest(service=""), timeout=5).status == wanted:
                return time.monotonic() - started
            time.sleep(0.1)
    raise AssertionError(
        f"health did not turn {health_pb2.HealthCheckResponse.ServingStatus.Name(wanted)} within {timeout} s"
    )


def test_a_stuck_engine_times_calls_out_and_turns_health_not_serving_until_it_answers(
    liveness_server: ServerProcess,
) -> None:
    with InferenceClient(liveness_server.target) as client:
        pid = engine_core_pid(client)
        os.kill(pid, signal.SIGSTOP)  # alive but answering nothing: a stuck engine
        try:
            asked = time.monotonic()
            with pytest.raises(ServerError) as caught:
                client.server_status()
            waited = time.monotonic() - asked
            assert (
                caught.value.code == grpc.StatusCode.DEADLINE_EXCEEDED and caught.value.reason == "ENGINE_CALL_TIMEOUT"
            )
            assert ENGINE_CALL_TIMEOUT_SECONDS <= waited < ENGINE_CALL_TIMEOUT_SECONDS + 4, waited

            wait_for_health(
                liveness_server.target,
                health_pb2.HealthCheckResponse.NOT_SERVING,
                timeout=ENGINE_STUCK_AFTER_SECONDS + 10,
            )
            status = client.server_status()  # answered at once, without queueing behind the stuck call
            assert "has not answered utility call mlnode_scheduler_state" in status.engine_problem, status
            assert not status.HasField("running_requests")
        finally:
            os.kill(pid, signal.SIGCONT)
        wait_for_health(liveness_server.target, health_pb2.HealthCheckResponse.SERVING, timeout=15)
        status = client.server_status()
        assert not status.engine_problem and status.HasField("running_requests")
        assert client.generate(token_ids=PROMPT_IDS, max_tokens=3).first.finish_reason == "length"
