"""The callback bodies' JSON: encoded once, when a body is stored (server.poc.delivery.callback_store) or streamed
(server.poc.delivery.callback_stream), and the stored texts of one POST merged into its body by splicing their artifact
arrays: every value goes out as the bytes it was stored as, never decoded into Python objects and encoded again.

Stored texts are read whatever wrote them (earlier releases stored the same compact json.dumps form)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

import msgspec

# A stored body's fields, each value as its stored bytes.
_FIELDS = msgspec.json.Decoder(dict[str, msgspec.Raw])
_ARRAY = msgspec.json.Decoder(list[msgspec.Raw])
_ENCODER = msgspec.json.Encoder()


def encode_body(body: Mapping[str, object]) -> bytes:
    """Compact JSON in the body's key order, as json.dumps writes it: the bytes the deployed server sends (Python's
    float repr for a p_value, non-ASCII escaped), which msgspec's encoder would spell otherwise (0.00001 for 1e-05)."""
    return json.dumps(body, separators=(",", ":")).encode()


def is_mergeable(text: str) -> bool:
    """A stored body that can share a POST: a JSON object with an artifact array."""
    try:
        return _artifacts(_fields(text)) is not None
    except ValueError:
        return False


def post_body(texts: Sequence[str]) -> bytes:
    """The POST's JSON from its entries' stored bodies: a single entry's as stored; several entries of a round as
    one body, the first's fields with every entry's artifacts in order (the deployed server's body for everything
    buffered). ValueError for a body that cannot be sent."""
    bodies = [_fields(text) for text in texts]
    if len(bodies) == 1:
        return texts[0].encode()
    arrays = [_artifacts(body) for body in bodies]
    spliced: list[msgspec.Raw] = []
    for array in arrays:
        if array is None:
            raise ValueError("a merged body without an artifact list")
        spliced += array
    return _ENCODER.encode({**bodies[0], "artifacts": spliced})


def _fields(text: str) -> dict[str, msgspec.Raw]:
    """ValueError for a text that is no JSON object."""
    try:
        return _FIELDS.decode(text)
    except msgspec.ValidationError:
        raise ValueError("not a JSON object") from None
    except msgspec.DecodeError as error:
        raise ValueError(str(error)) from None


def _artifacts(fields: dict[str, msgspec.Raw]) -> list[msgspec.Raw] | None:
    """The body's artifact array, each artifact as its stored bytes; None when it has none."""
    raw = fields.get("artifacts")
    if raw is None:
        return None
    try:
        return _ARRAY.decode(raw)
    except msgspec.DecodeError:
        return None
