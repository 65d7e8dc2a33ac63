"""The priority gate around a mining round, and the engine's caches through PoC work.

While a round runs: new inference is refused before any message (UNAVAILABLE, POC_IN_PROGRESS,
RetryInfo, grpc-retry-pushback-ms), streams in flight end with UNAVAILABLE POC_PREEMPTED after every
token produced before it, the inference service's health is NOT_SERVING; after the stop everything
serves again. PoC forwards borrow KV blocks and give them back: the prefix cache survives a round and
a greedy stream running beside recompute batches is token-identical to an undisturbed run.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from gonka.mlnode.client import AsyncInferenceClient, InferenceClient, ServerError
from gonka.mlnode.v1 import poc_pb2, poc_pb2_grpc
from gonka.mlnode.v1 import validation_pb2 as vpb
from gonka.mlnode.v1 import validation_pb2_grpc

PROMPT_IDS = [9707, 1879, 11, 419, 374, 264, 1273]
LONG = dict(token_ids=PROMPT_IDS, max_tokens=4000, ignore_eos=True, temperature=0.0)
INFERENCE_SERVICE = "gonka.mlnode.v1.InferenceService"
POC_SERVICE = "gonka.mlnode.v1.PocService"
STREAMS = 16


@pytest.fixture
def poc(server) -> Iterator[poc_pb2_grpc.PocServiceStub]:
    channel = grpc.insecure_channel(server.target)
    stub = poc_pb2_grpc.PocServiceStub(channel)
    yield stub
    # Whatever a test did, no round may outlive it: a round refuses inference to every later test.
    with contextlib.suppress(grpc.RpcError):
        if stub.GetRoundStatus(poc_pb2.GetRoundStatusRequest()).status.state == poc_pb2.ROUND_STATE_GENERATING:
            stub.StopRound(poc_pb2.StopRoundRequest())
    channel.close()


def round_request(model: str, **overrides) -> poc_pb2.StartRoundRequest:
    fields = dict(block_hash="gate-block", block_height=7, public_key="gate-key", batch_size=8)
    fields.update(overrides)
    return poc_pb2.StartRoundRequest(params=poc_pb2.PocParams(model=model, seq_len=64), **fields)


def health_of(target: str, service: str) -> int:
    with grpc.insecure_channel(target) as channel:
        return (
            health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=service), timeout=5).status
        )


def test_a_round_preempts_streams_refuses_inference_and_hands_back(server, client: InferenceClient, poc) -> None:
    model = client.model_info().served_model_name

    async def scenario() -> tuple[list[tuple[int, ServerError | None]], float]:
        async with AsyncInferenceClient(server.target) as aio:
            first_message = [asyncio.Event() for _ in range(STREAMS)]

            async def stream(index: int) -> tuple[int, ServerError | None]:
                received = 0
                try:
                    # Half take the token-stream path, half vLLM's generate(): both must be preempted.
                    async for response in aio.stream(**LONG, request_id=f"gate-{index}", include_text=index % 2 == 1):
                        received += len(response.tokens.ids)
                        first_message[index].set()
                except ServerError as error:
                    return received, error
                return received, None

            tasks = [asyncio.create_task(stream(i)) for i in range(STREAMS)]
            await asyncio.wait_for(asyncio.gather(*(event.wait() for event in first_message)), 60)
            started = time.monotonic()
            await asyncio.to_thread(poc.StartRound, round_request(model))
            results = await asyncio.wait_for(asyncio.gather(*tasks), 30)
            return results, time.monotonic() - started

    results, _ = asyncio.run(scenario())
    try:
        for received, error in results:
            assert received > 0
            assert error is not None, "a stream in flight ran on through the round"
            assert (error.code, error.reason) == (grpc.StatusCode.UNAVAILABLE, "POC_PREEMPTED")
            assert error.retry_after_seconds and error.retry_after_seconds > 0

        with pytest.raises(ServerError) as refused:
            client.generate(token_ids=PROMPT_IDS, max_tokens=4)
        assert (refused.value.code, refused.value.reason) == (grpc.StatusCode.UNAVAILABLE, "POC_IN_PROGRESS")
        assert refused.value.retry_after_seconds > 0
        _assert_pushback_trailer(server.target)
        _assert_validate_inference_refused(server.target)

        assert health_of(server.target, INFERENCE_SERVICE) == health_pb2.HealthCheckResponse.NOT_SERVING
        assert health_of(server.target, POC_SERVICE) == health_pb2.HealthCheckResponse.SERVING
        status = client.server_status()
        assert status.inference_gate_closed and status.poc_round_id
        round_status = poc.GetRoundStatus(poc_pb2.GetRoundStatusRequest()).status
        assert round_status.round_id == status.poc_round_id
        assert round_status.preempted_streams == STREAMS
    finally:
        stopped = poc.StopRound(poc_pb2.StopRoundRequest()).status
    assert stopped.state == poc_pb2.ROUND_STATE_STOPPED and stopped.nonces_produced > 0
    assert health_of(server.target, INFERENCE_SERVICE) == health_pb2.HealthCheckResponse.SERVING
    assert not client.server_status().inference_gate_closed
    assert len(client.generate(token_ids=PROMPT_IDS, max_tokens=4).first.token_ids) == 4


def _assert_pushback_trailer(target: str) -> None:
    """gRPC's native retry policies read grpc-retry-pushback-ms, not RetryInfo."""
    with grpc.insecure_channel(target) as channel:
        from gonka.mlnode.v1 import inference_pb2 as pb
        from gonka.mlnode.v1 import inference_pb2_grpc

        call = inference_pb2_grpc.InferenceServiceStub(channel).Generate(
            pb.GenerateRequest(token_ids=pb.TokenIds(ids=PROMPT_IDS))
        )
        with pytest.raises(grpc.RpcError) as caught:
            list(call)
        trailers = dict(caught.value.trailing_metadata())
        assert int(trailers["grpc-retry-pushback-ms"]) > 0


def _assert_validate_inference_refused(target: str) -> None:
    with grpc.insecure_channel(target) as channel:
        call = validation_pb2_grpc.ValidationServiceStub(channel).ValidateInference(vpb.ValidateInferenceRequest())
        with pytest.raises(grpc.RpcError) as caught:
            list(call)
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
        assert ServerError.from_rpc_error(caught.value).reason == "POC_IN_PROGRESS"


def test_starting_a_round_twice_names_the_running_round(client: InferenceClient, poc) -> None:
    model = client.model_info().served_model_name
    started = poc.StartRound(round_request(model)).status
    try:
        with pytest.raises(grpc.RpcError) as caught:
            poc.StartRound(round_request(model))
        assert caught.value.code() == grpc.StatusCode.ALREADY_EXISTS
        info = _error_info(caught.value)
        assert info.reason == "ROUND_ALREADY_RUNNING"
        assert info.metadata["round_id"] == started.round_id
        assert (info.metadata["block_hash"], info.metadata["block_height"]) == ("gate-block", "7")
        assert info.metadata["state"] == "ROUND_STATE_GENERATING"
    finally:
        poc.StopRound(poc_pb2.StopRoundRequest(round_id=started.round_id))


def _error_info(error: grpc.RpcError):
    from google.rpc import error_details_pb2
    from grpc_status import rpc_status

    for detail in rpc_status.from_call(error).details:
        info = error_details_pb2.ErrorInfo()
        if detail.Unpack(info):
            return info
    raise AssertionError("no ErrorInfo in the error")


def test_the_prefix_cache_survives_a_round(client: InferenceClient, poc) -> None:
    model = client.model_info().served_model_name
    prompt = [(7 * i + 11) % 150000 for i in range(700)]
    before = client.generate(token_ids=prompt, max_tokens=12, temperature=0.0).first
    poc.StartRound(round_request(model, batch_size=32))
    try:
        # Long enough for many batches: each borrows blocks and gives them back.
        deadline = time.monotonic() + 60
        while poc.GetRoundStatus(poc_pb2.GetRoundStatusRequest()).status.last_sequence < 40:
            assert time.monotonic() < deadline, "the round made no progress"
            time.sleep(0.1)
    finally:
        poc.StopRound(poc_pb2.StopRoundRequest())
    after = client.generate(token_ids=prompt, max_tokens=12, temperature=0.0).first
    assert after.token_ids == before.token_ids
    # Every whole block of the prompt came from the cache.
    assert after.usage.cached_tokens >= len(prompt) - 128


def test_a_greedy_stream_beside_recompute_batches_is_undisturbed(server, client: InferenceClient, poc) -> None:
    model = client.model_info().served_model_name
    request = dict(token_ids=PROMPT_IDS, max_tokens=600, ignore_eos=True, temperature=0.0)
    undisturbed = client.generate(**request).first.token_ids
    compute = poc_pb2.ComputeArtifactsRequest(
        block_hash="beside",
        public_key="inference",
        params=poc_pb2.PocParams(model=model, seq_len=64),
        nonces=list(range(50 * 8)),
        batch_size=8,
    )

    async def both() -> tuple[list[int], int]:
        async with AsyncInferenceClient(server.target) as aio:

            async def recompute() -> int:
                async with grpc.aio.insecure_channel(server.target) as channel:
                    stub = poc_pb2_grpc.PocServiceStub(channel)
                    return len([message async for message in stub.ComputeArtifacts(compute)])

            generation, batches = await asyncio.gather(aio.generate(**request), recompute())
            return generation.first.token_ids, batches

    disturbed, batches = asyncio.run(both())
    assert batches == 50
    assert disturbed == undisturbed


def test_a_round_preempts_validate_inference_in_flight(server, client: InferenceClient, poc) -> None:
    from gonka.mlnode.client import build_request, inference_item

    model = client.model_info().served_model_name
    fields = dict(token_ids=PROMPT_IDS, max_tokens=1500, ignore_eos=True, temperature=0.0, top_logprobs=5)
    recorded = client.generate(build_request(**fields, chain_top_logprobs=True)).first
    item = inference_item(build_request(**fields), recorded.token_ids, recorded.logprobs.chain_top, threshold=0.9)

    async def scenario() -> tuple[list, BaseException | None]:
        async with grpc.aio.insecure_channel(server.target) as channel:
            call = validation_pb2_grpc.ValidationServiceStub(channel).ValidateInference(
                vpb.ValidateInferenceRequest(items=[item] * 8)
            )
            received = []

            async def read() -> BaseException | None:
                try:
                    async for response in call:
                        received.append(response)
                except grpc.aio.AioRpcError as error:
                    return error
                return None

            reader = asyncio.create_task(read())
            deadline = time.monotonic() + 60
            while (await asyncio.to_thread(client.server_status)).running_requests < 8:
                assert time.monotonic() < deadline, "the replays never started"
                await asyncio.sleep(0.05)
            await asyncio.to_thread(poc.StartRound, round_request(model))
            return received, await asyncio.wait_for(reader, 30)

    try:
        received, error = asyncio.run(scenario())
    finally:
        poc.StopRound(poc_pb2.StopRoundRequest())
    assert received == [], "an aborted replay was reported as a verdict"
    assert error is not None and error.code() == grpc.StatusCode.UNAVAILABLE
    assert ServerError.from_rpc_error(error).reason == "POC_PREEMPTED"
