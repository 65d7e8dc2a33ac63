"""One stream as the client saw it, the clock that times it, and a load client that runs streams (Scenario)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from benchmarks.serving.errors import BenchmarkError
from benchmarks.serving.launcher import LiveServer

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
