"""Delivers one recompute job's verdict to the API node's `{url}/validated`, on the deployed retry schedule."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import aiohttp

from .retry import PostOutcome, RetrySchedule, post_with_retry
from .spool import Spool

log = logging.getLogger(__name__)

VALIDATED_FIELDS = (
    "request_id",
    "block_hash",
    "block_height",
    "public_key",
    "node_id",
    "n_total",
    "n_mismatch",
    "mismatch_nonces",
    "p_value",
    "fraud_detected",
)


def validated_url(url: str) -> str:
    return url.rstrip("/") + "/validated"


def require_validated_fields(body: Mapping[str, Any]) -> None:
    missing = [field for field in VALIDATED_FIELDS if field not in body]
    if missing:
        raise ValueError(f"validated body lacks {missing}")


async def post_validated(
    session: aiohttp.ClientSession,
    url: str,
    body: Mapping[str, Any],
    retry: RetrySchedule,
    spool: Spool,
    on_failed_attempt: Callable[[], None] = lambda: None,
) -> PostOutcome:
    """POST the verdict to `{url}/validated`, settled as artifact bodies are (callbacks.py): refused through
    the schedule → given up; unreachable through it → spooled. A caller that may cancel it before it
    settles spools the body itself (CallbackDeliveries does): a task cancelled before its first step never
    runs this body, so no handler in here could catch that case."""
    require_validated_fields(body)
    target = validated_url(url)
    outcome = await post_with_retry(session, target, body, retry, on_failed_attempt)
    if outcome is PostOutcome.UNREACHABLE:
        spool.append(target, body)
        log.warning("validation result %s: %s unreachable, spooled", body["request_id"], target)
    elif outcome is PostOutcome.REFUSED:
        log.warning("validation result %s: refused by %s through the retry schedule, given up", body["request_id"], target)
    return outcome
