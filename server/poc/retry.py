"""One JSON POST to the API node, retried on the deployed schedule (1 s doubling to 30 s, 10 attempts)."""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

import aiohttp


@dataclass(frozen=True)
class RetrySchedule:
    """Delays in seconds, so tests can run the real schedule shape in milliseconds."""

    first_delay: float = 1.0
    factor: float = 2.0
    max_delay: float = 30.0
    attempts: int = 10
    attempt_timeout: float = 10.0  # one request, connect to last byte: a hung receiver counts as a failure

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"attempts must be >= 1, got {self.attempts}")
        if self.first_delay < 0 or self.max_delay < 0 or self.factor < 1:
            raise ValueError(f"delays must be >= 0 and factor >= 1, got {self}")
        if self.attempt_timeout <= 0:
            raise ValueError(f"attempt_timeout must be > 0, got {self.attempt_timeout}")

    def delays(self) -> Iterator[float]:
        """The waits between attempts: attempts - 1 of them."""
        delay = self.first_delay
        for _ in range(self.attempts - 1):
            yield min(delay, self.max_delay)
            delay *= self.factor


class PostOutcome(enum.Enum):
    DELIVERED = "delivered"  # some attempt got a status < 400
    REFUSED = "refused"  # the last attempt reached the receiver and got a status >= 400
    UNREACHABLE = "unreachable"  # the last attempt got no answer (connection error or timeout)


async def post_with_retry(
    session: aiohttp.ClientSession,
    url: str,
    body: Mapping[str, object],
    retry: RetrySchedule,
    on_failed_attempt: Callable[[], None] = lambda: None,
) -> PostOutcome:
    """POST `body` as JSON until a status < 400 or the schedule runs out. Cancellation propagates at once."""
    delays = retry.delays()
    timeout = aiohttp.ClientTimeout(total=retry.attempt_timeout)
    while True:
        try:
            async with session.post(url, json=body, timeout=timeout) as response:
                if response.status < 400:
                    return PostOutcome.DELIVERED
                outcome = PostOutcome.REFUSED
        except (aiohttp.ClientError, asyncio.TimeoutError):
            outcome = PostOutcome.UNREACHABLE
        on_failed_attempt()
        delay = next(delays, None)
        if delay is None:
            return outcome
        await asyncio.sleep(delay)
