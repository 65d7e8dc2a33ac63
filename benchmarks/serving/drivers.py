"""The load clients: one stream as the client saw it and the clock that times it (StreamResult, TokenClock), a
load client that runs streams (Scenario), and one driver per protocol: this server through the project's own Python
client, vLLM's OpenAI-compatible server (streamed chat completions over server-sent events) and vLLM's own gRPC
server (token-id input, no logprobs)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

import aiohttp
import grpc

from benchmarks.serving.servers import LiveServer
from benchmarks.serving.settings import SERVED_MODEL_NAME, TEMPERATURE, TOP_LOGPROBS, BenchmarkError, Workload
from gonka.mlnode.client import AsyncInferenceClient, ServerError, build_request
from gonka.mlnode.v1 import inference_pb2 as pb

STREAM_TIMEOUT_SECONDS = 900.0


@dataclass(frozen=True)
class StreamResult:
    sent_at: float
    first_token_at: float
    last_token_at: float
    tokens: int
    prompt_tokens: int | None  # as the server reported it

    @property
    def ttft_ms(self) -> float:
        return (self.first_token_at - self.sent_at) * 1000


StreamFn = Callable[[int, int], Awaitable[StreamResult]]


@dataclass(frozen=True)
class Scenario:
    server: str  # the configuration's label: a server kind, or ours with an option
    logprobs: bool
    stream: StreamFn  # (seed, tokens) -> the finished stream
    live: LiveServer


class TokenClock:
    """Times the first and last token of one stream and counts them."""

    def __init__(self) -> None:
        self.sent_at = time.perf_counter()
        self.first: float | None = None
        self.last = 0.0
        self.tokens = 0

    def received(self, count: int) -> None:
        if count:
            now = time.perf_counter()
            self.first = self.first or now
            self.last = now
            self.tokens += count

    def result(self, where: str, prompt_tokens: int | None) -> StreamResult:
        if self.first is None:
            raise BenchmarkError(f"{where}: the stream delivered no tokens")
        return StreamResult(self.sent_at, self.first, self.last, self.tokens, prompt_tokens)


async def ours_scenarios(stack: AsyncExitStack, live: LiveServer, workload: Workload) -> list[Scenario]:
    client = await stack.enter_async_context(AsyncInferenceClient(live.target))
    sampling: dict[str, Any] = {"temperature": TEMPERATURE, "ignore_eos": True}

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


async def openai_scenarios(stack: AsyncExitStack, live: LiveServer, workload: Workload) -> list[Scenario]:
    connector = aiohttp.TCPConnector(limit=0)  # one connection per stream, however many
    timeout = aiohttp.ClientTimeout(total=STREAM_TIMEOUT_SECONDS)
    session = await stack.enter_async_context(aiohttp.ClientSession(connector=connector, timeout=timeout))
    url = f"http://{live.target}/v1/chat/completions"
    messages = [{"role": role, "content": content} for role, content in workload.messages]

    async def with_logprobs(seed: int, tokens: int) -> StreamResult:
        body = {
            "model": SERVED_MODEL_NAME,
            "messages": messages,
            "stream": True,
            "stream_options": {"include_usage": True},  # a final usage chunk, to cross-check counts
            "logprobs": True,
            "top_logprobs": TOP_LOGPROBS,
            "max_tokens": tokens,
            "ignore_eos": True,
            "seed": seed,
            "temperature": TEMPERATURE,
        }
        return await openai_stream(session, url, body)

    return [Scenario("openai", True, with_logprobs, live)]


async def sse_events(response: aiohttp.ClientResponse) -> AsyncIterator[Any]:
    async for raw in response.content:
        line = raw.strip()
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            return
        yield json.loads(data)


async def openai_stream(session: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> StreamResult:
    clock = TokenClock()
    usage: dict[str, int] | None = None
    finish_reason: str | None = None
    try:
        async with session.post(url, json=body) as response:
            if response.status != 200:
                raise BenchmarkError(f"openai: HTTP {response.status}: {(await response.text())[:500]}")
            async for event in sse_events(response):
                if "error" in event:
                    raise BenchmarkError(f"openai: error event: {event['error']}")
                usage = event.get("usage") or usage
                for choice in event.get("choices", ()):
                    # Every generated token carries its logprobs entry; the first (role) chunk has none.
                    content = (choice.get("logprobs") or {}).get("content") or ()
                    if any(len(entry["top_logprobs"]) != TOP_LOGPROBS for entry in content):
                        raise BenchmarkError("openai: a token came without its top logprobs")
                    clock.received(len(content))
                    finish_reason = choice.get("finish_reason") or finish_reason
    except aiohttp.ClientError as error:
        raise BenchmarkError(f"openai: {error!r}") from None
    if finish_reason != "length" or usage is None or usage["completion_tokens"] != clock.tokens:
        raise BenchmarkError(f"openai: finish {finish_reason!r}, usage {usage}, {clock.tokens} tokens received")
    return clock.result("openai", usage["prompt_tokens"])


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
