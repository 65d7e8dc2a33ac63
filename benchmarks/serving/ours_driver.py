"""Streams from this server, through the project's own Python client."""

from __future__ import annotations

from contextlib import AsyncExitStack

from benchmarks.serving.errors import BenchmarkError
from benchmarks.serving.launcher import LiveServer
from benchmarks.serving.streams import STREAM_TIMEOUT_SECONDS, Scenario, StreamResult, TokenClock
from benchmarks.serving.workload import TEMPERATURE, TOP_LOGPROBS, Workload
from gonka.mlnode.client import AsyncInferenceClient, ServerError, build_request
from gonka.mlnode.v1 import inference_pb2 as pb


async def ours_scenarios(stack: AsyncExitStack, live: LiveServer, workload: Workload) -> list[Scenario]:
    client = await stack.enter_async_context(AsyncInferenceClient(live.target))
    sampling = {"temperature": TEMPERATURE, "ignore_eos": True}

    async def with_logprobs(seed: int, tokens: int) -> StreamResult:
        request = build_request(
            messages=workload.messages, top_logprobs=TOP_LOGPROBS, seed=seed, max_tokens=tokens, **sampling
        )
        return await ours_stream(client, request, TOP_LOGPROBS)

    async def without_logprobs(seed: int, tokens: int) -> StreamResult:
        request = build_request(token_ids=workload.prompt_ids, seed=seed, max_tokens=tokens, **sampling)
        return await ours_stream(client, request, None)

    async def coalesced_with_logprobs(seed: int, tokens: int) -> StreamResult:
        request = build_request(
            messages=workload.messages,
            top_logprobs=TOP_LOGPROBS,
            seed=seed,
            max_tokens=tokens,
            coalesce_ms=workload.coalesce_ms,
            **sampling,
        )
        return await ours_stream(client, request, TOP_LOGPROBS)

    scenarios = [Scenario("ours", True, with_logprobs, live), Scenario("ours", False, without_logprobs, live)]
    if workload.coalesce_ms:
        # A separate label: the goal checks compare the default per-step streaming only.
        scenarios.append(Scenario(f"ours, coalesce {workload.coalesce_ms} ms", True, coalesced_with_logprobs, live))
    return scenarios


async def ours_stream(client: AsyncInferenceClient, request: pb.GenerateRequest, top_k: int | None) -> StreamResult:
    clock = TokenClock()
    finish: pb.Finish | None = None
    try:
        async for response in client.stream(request, timeout=STREAM_TIMEOUT_SECONDS):
            batch = response.tokens
            if top_k is not None and (
                len(batch.logprobs) != len(batch.ids) or len(batch.top_ids) != top_k * len(batch.ids)
            ):
                raise BenchmarkError(f"ours: a message carries {len(batch.ids)} ids but incomplete logprob columns")
            clock.received(len(batch.ids))
            if response.HasField("finish"):
                finish = response.finish
    except ServerError as error:
        raise BenchmarkError(f"ours: {error}") from None
    if finish is None or finish.reason != pb.FINISH_REASON_LENGTH:
        raise BenchmarkError(f"ours: the stream ended without a length finish: {finish}")
    return clock.result("ours", finish.usage.prompt_tokens)
