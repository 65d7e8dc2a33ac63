"""Streams from vLLM's own gRPC server (vllm.entrypoints.grpc_server): token-id input, no logprobs."""

from __future__ import annotations

import uuid
from contextlib import AsyncExitStack
from typing import Any

import grpc

from benchmarks.serving.errors import BenchmarkError
from benchmarks.serving.launcher import LiveServer
from benchmarks.serving.streams import STREAM_TIMEOUT_SECONDS, Scenario, StreamResult, TokenClock
from benchmarks.serving.workload import TEMPERATURE, Workload


async def vllm_grpc_scenarios(stack: AsyncExitStack, live: LiveServer, workload: Workload) -> list[Scenario]:
    from vllm.grpc import vllm_engine_pb2, vllm_engine_pb2_grpc

    channel = await stack.enter_async_context(grpc.aio.insecure_channel(live.target))
    stub = vllm_engine_pb2_grpc.VllmEngineStub(channel)
    tokenized = vllm_engine_pb2.TokenizedInput(input_ids=workload.prompt_ids)

    async def without_logprobs(seed: int, tokens: int) -> StreamResult:
        request = vllm_engine_pb2.GenerateRequest(
            request_id=f"bench-{uuid.uuid4().hex}",  # this server assigns none
            tokenized=tokenized,
            sampling_params=vllm_engine_pb2.SamplingParams(
                temperature=TEMPERATURE, max_tokens=tokens, ignore_eos=True, seed=seed
            ),
            stream=True,
        )
        return await vllm_grpc_stream(stub, request)

    return [Scenario("vllm-grpc", False, without_logprobs, live)]


async def vllm_grpc_stream(stub: Any, request: Any) -> StreamResult:
    clock = TokenClock()
    prompt_tokens: int | None = None
    finish_reason: str | None = None
    try:
        async for response in stub.Generate(request, timeout=STREAM_TIMEOUT_SECONDS):
            # Streaming: `chunk` messages carry the new tokens; the closing `complete` repeats the last delta.
            if response.HasField("chunk"):
                clock.received(len(response.chunk.token_ids))
                prompt_tokens = response.chunk.prompt_tokens or prompt_tokens
            else:
                finish_reason = response.complete.finish_reason
    except grpc.RpcError as error:
        raise BenchmarkError(f"vllm-grpc: {error.code().name}: {error.details()}") from None
    if finish_reason != "length":
        raise BenchmarkError(f"vllm-grpc: the stream ended with finish {finish_reason!r}")
    return clock.result("vllm-grpc", prompt_tokens)
