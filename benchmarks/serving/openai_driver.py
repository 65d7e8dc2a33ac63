"""Streams from vLLM's OpenAI-compatible server: streamed chat completions over HTTP (server-sent events)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any

import aiohttp

from benchmarks.serving.errors import BenchmarkError
from benchmarks.serving.launcher import LiveServer
from benchmarks.serving.settings import SERVED_MODEL_NAME
from benchmarks.serving.streams import STREAM_TIMEOUT_SECONDS, Scenario, StreamResult, TokenClock
from benchmarks.serving.workload import TEMPERATURE, TOP_LOGPROBS, Workload


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
