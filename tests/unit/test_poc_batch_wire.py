"""A PoC batch and its result cross vLLM's RPC as plain msgpack values and come back as the same typed structs."""

from __future__ import annotations

import msgspec
import pytest

from engine_ext.poc.batch import BATCH_OK, PocBatch, PocBatchResult


def test_a_batch_comes_back_equal_and_hashes_alike() -> None:
    batch = PocBatch("hash", "key", (1, 2, 3), 16, 8, True, next_nonces=(4, 5), withdrawn_if_exists="/tmp/w")
    wire = msgspec.msgpack.decode(msgspec.msgpack.encode(batch.to_wire()))
    assert wire["nonces"] == [1, 2, 3]
    back = PocBatch.from_wire(wire)
    assert back == batch and back.inputs_key() == batch.inputs_key()


def test_a_result_keeps_its_vectors_as_bytes() -> None:
    result = PocBatchResult(BATCH_OK, vectors=b"\x00\x3c", outcomes=[0], forward_seconds=0.5, detail="d")
    wire = msgspec.msgpack.decode(msgspec.msgpack.encode(result.to_wire()))
    assert wire["vectors"] == b"\x00\x3c"
    assert PocBatchResult.from_wire(wire) == result


def test_a_field_of_the_wrong_type_is_named() -> None:
    with pytest.raises(msgspec.ValidationError, match=r"\$\.outcomes"):
        PocBatchResult.from_wire({"status": BATCH_OK, "outcomes": "none"})
