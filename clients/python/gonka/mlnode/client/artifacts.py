"""PoC artifacts as plain values: an ArtifactBatch's columns as (nonce, float16 vector) pairs, or in
the network's form (nonce, vector_b64), and the network's JSON list of claims.

The codec is the one poc-v2.md section 5.7 defines (k float16 values, little-endian; standard base64
with padding). It is written here with numpy alone rather than imported from
engine_ext.consensus.artifact, because that module needs torch: the client package must stay
installable and usable without the server's engine.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from gonka.mlnode.v1 import poc_pb2

F16_LE = np.dtype("<f2")


def _row_bytes(batch: poc_pb2.ArtifactBatch) -> int:
    """Bytes per artifact, after checking that the batch's columns agree."""
    if batch.k_dim < 1:
        raise ValueError(f"an artifact batch needs k_dim >= 1, got {batch.k_dim}")
    width = 2 * batch.k_dim
    if len(batch.vectors) != width * len(batch.nonces):
        raise ValueError(
            f"batch {batch.sequence}: {len(batch.vectors)} vector bytes for {len(batch.nonces)} nonces of k_dim {batch.k_dim} "
            f"(expected {width * len(batch.nonces)})"
        )
    return width


def batch_vectors(batch: poc_pb2.ArtifactBatch) -> np.ndarray:
    """The batch's vectors as one float16 array [len(nonces), k_dim] (a copy in native byte order)."""
    _row_bytes(batch)
    return np.frombuffer(batch.vectors, dtype=F16_LE).astype(np.float16).reshape(len(batch.nonces), batch.k_dim)


def decode_batch(batch: poc_pb2.ArtifactBatch) -> list[tuple[int, np.ndarray]]:
    """[(nonce, float16 vector [k_dim])], in the batch's order."""
    return list(zip(batch.nonces, batch_vectors(batch)))


def batch_b64(batch: poc_pb2.ArtifactBatch) -> list[tuple[int, str]]:
    """[(nonce, vector_b64)] in the network's form. Each vector's bytes are encoded as they came, so
    the result is exactly what the node produced (no float round trip)."""
    width = _row_bytes(batch)
    raw = batch.vectors
    return [
        (nonce, base64.b64encode(raw[width * index : width * (index + 1)]).decode("ascii"))
        for index, nonce in enumerate(batch.nonces)
    ]


def vector_b64(vector: np.ndarray) -> str:
    """One vector [k] (any float dtype; converted to float16) in the network's base64 form."""
    array = np.asarray(vector)
    if array.ndim != 1:
        raise ValueError(f"an artifact vector must be 1-D, got shape {array.shape}")
    return base64.b64encode(array.astype(F16_LE).tobytes()).decode("ascii")


def vector_from_b64(text: str) -> np.ndarray:
    """A network base64 vector as a float16 array [k]; ValueError when it is not base64 of whole
    float16 values."""
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError) as error:
        raise ValueError(f"not valid base64: {error}") from None
    if not raw or len(raw) % 2:
        raise ValueError(f"{len(raw)} bytes is not a whole number of float16 values")
    return np.frombuffer(raw, dtype=F16_LE).astype(np.float16)


def claims_to_json(pairs: Iterable[tuple[int, str]]) -> list[dict[str, Any]]:
    """[(nonce, vector_b64)] as the network's JSON list: [{"nonce": n, "vector_b64": "..."}]."""
    return [{"nonce": nonce, "vector_b64": text} for nonce, text in pairs]


def claims_from_json(items: Sequence[Mapping[str, Any]]) -> list[tuple[int, str]]:
    """The network's JSON list of claims as [(nonce, vector_b64)]. The vectors are not decoded here:
    a malformed one is the validator's to count as a mismatch, not the reader's to refuse."""
    pairs = []
    for index, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise ValueError(f"claim {index}: expected an object with nonce and vector_b64, got {type(item).__name__}")
        nonce, text = item.get("nonce"), item.get("vector_b64")
        # bool is an int subclass; a true/false nonce is a broken file, not nonce 1/0.
        if not isinstance(nonce, int) or isinstance(nonce, bool):
            raise ValueError(f"claim {index}: nonce must be an integer, got {nonce!r}")
        if not isinstance(text, str):
            raise ValueError(f"claim {index}: vector_b64 must be a string, got {text!r}")
        pairs.append((nonce, text))
    return pairs
