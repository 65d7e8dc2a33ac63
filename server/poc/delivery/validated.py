"""One recompute job's verdict for the API node's `{url}/validated`: the deployed body, checked whole before it
goes into the durable callback store (server.poc.delivery.callback_store), which delivers it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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
