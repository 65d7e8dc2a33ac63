"""One JSON POST to the API node, retried on the deployed schedule (1 s doubling to 30 s, 10 attempts)."""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

import aiohttp

# 4xx answers that say "later", not "never": retried like a 5xx.
RETRYABLE_CLIENT_ERRORS = (408, 429)


# Hand-written, not a retry library's: the schedule is the deployed server's, delay for delay.
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
    DELIVERED = "delivered"  # an attempt got a status < 400
    REJECTED = "rejected"  # an attempt got a 4xx other than 408 and 429: the receiver refuses this body for good
    FAILED = "failed"  # every attempt of the schedule failed (5xx, 408, 429, no answer, timeout)


@dataclass(frozen=True)
class PostResult:
    outcome: PostOutcome
    detail: str  # the last attempt's answer ("HTTP 200", "HTTP 503", "ClientConnectorError: ...")
    answered: bool  # the last attempt got an HTTP answer (False: no connection, or no answer in time)


async def post_with_retry(
    session: aiohttp.ClientSession,
    url: str,
    body: bytes,
    headers: Mapping[str, str],
    retry: RetrySchedule,
    on_failed_attempt: Callable[[str], None],
) -> PostResult:
    """POST `body` (JSON) with `headers` until a status < 400, a final refusal or the end of the schedule;
    `on_failed_attempt` hears of each failure. Cancellation propagates at once."""
    delays = retry.delays()
    timeout = aiohttp.ClientTimeout(total=retry.attempt_timeout)
    sent_headers = {"Content-Type": "application/json", **headers}
    while True:
        try:
            async with session.post(url, data=body, headers=sent_headers, timeout=timeout) as response:
                detail, answered = f"HTTP {response.status}", True
                if response.status < 400:
                    return PostResult(PostOutcome.DELIVERED, detail, answered)
                if response.status < 500 and response.status not in RETRYABLE_CLIENT_ERRORS:
                    on_failed_attempt(detail)
                    return PostResult(PostOutcome.REJECTED, detail, answered)
        except asyncio.TimeoutError:
            detail, answered = f"no answer within {retry.attempt_timeout:g} s", False
        except aiohttp.ClientError as error:
            detail, answered = f"{type(error).__name__}: {error}", False
        on_failed_attempt(detail)
        delay = next(delays, None)
        if delay is None:
            return PostResult(PostOutcome.FAILED, detail, answered)
        await asyncio.sleep(delay)
