"""One recompute job's verdict for the API node's `{url}/validated`: the deployed body, which goes into the durable
callback store (server.poc.delivery.callback_store), which delivers it, or to the pull stream's sink."""

from __future__ import annotations

from typing import TypedDict


class ValidatedBody(TypedDict):
    """The deployed `/validated` body, in this key order (gonka-network.md). A TypedDict rather than a struct: it is
    a JSON object wherever it goes (the store, the pull stream's sink, a generate job's result)."""

    request_id: str
    block_hash: str
    block_height: int
    public_key: str
    node_id: int
    n_total: int
    n_mismatch: int
    mismatch_nonces: list[int]
    p_value: float
    fraud_detected: bool


# The body's fields in the deployed order.
VALIDATED_FIELDS = tuple(ValidatedBody.__annotations__)


def validated_url(url: str) -> str:
    return url.rstrip("/") + "/validated"
