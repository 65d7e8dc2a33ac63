"""The callback bodies' JSON: the deployed compact form, byte for byte, and the merge of stored bodies into one POST,
those an earlier release stored (json.dumps) included."""

from __future__ import annotations

import json

import numpy as np
import pytest

from server.poc.delivery.body_json import encode_body, is_mergeable, post_body
from server.poc.delivery.callbacks import CallbackIdentity, GeneratedBodies

IDENTITY = CallbackIdentity(public_key="pk-1", block_hash="0xabc", block_height=123, node_id=2)
ONE_AND_A_HALF = np.array([1.5], dtype="<f2").tobytes()  # base64 "AD4="
ENCODING = b'"encoding":{"dtype":"f16","k_dim":1,"endian":"le"}'


def test_a_rounds_generated_body_is_the_deployed_compact_json_without_request_id() -> None:
    body = GeneratedBodies(IDENTITY, 1).of([7], ONE_AND_A_HALF)
    assert encode_body(body) == (
        b'{"public_key":"pk-1","block_hash":"0xabc","block_height":123,"node_id":2,'
        b'"artifacts":[{"nonce":7,"vector_b64":"AD4="}],' + ENCODING + b"}"
    )


def test_a_jobs_generated_body_carries_its_request_id_after_the_identity() -> None:
    body = GeneratedBodies(IDENTITY, 1, request_id="8080:job").of([7], ONE_AND_A_HALF)
    assert encode_body(body) == (
        b'{"public_key":"pk-1","block_hash":"0xabc","block_height":123,"node_id":2,"request_id":"8080:job",'
        b'"artifacts":[{"nonce":7,"vector_b64":"AD4="}],' + ENCODING + b"}"
    )


def test_bodies_an_earlier_release_stored_merge_with_new_ones_as_that_release_merged_them() -> None:
    """The first body's fields, unknown ones and their escapes included, with every body's artifacts in order."""
    earlier = json.dumps(
        {"note": "\u00e9", "artifacts": [{"nonce": 1, "vector_b64": "AD4="}], "k": 1}, separators=(",", ":")
    )
    new = encode_body(GeneratedBodies(IDENTITY, 1).of([2, 3], ONE_AND_A_HALF * 2)).decode()
    assert is_mergeable(earlier) and is_mergeable(new)
    assert post_body([earlier, new]) == (
        b'{"note":"\\u00e9","artifacts":[{"nonce":1,"vector_b64":"AD4="},'
        b'{"nonce":2,"vector_b64":"AD4="},{"nonce":3,"vector_b64":"AD4="}],"k":1}'
    )


@pytest.mark.parametrize(
    "text", ['{"request_id":"r","n_total":2}', '{"artifacts":null}', '[{"artifacts":[]}]', '{"artifacts":[tor']
)
def test_a_body_without_an_artifact_array_shares_no_post(text: str) -> None:
    assert not is_mergeable(text)


def test_a_body_alone_goes_as_stored_and_an_unreadable_one_is_refused() -> None:
    validated = '{"request_id":"r", "p_value":1e-05}'
    assert post_body([validated]) == validated.encode()
    for unreadable in ('{"artifacts":[tor', "[1]"):
        with pytest.raises(ValueError):
            post_body([unreadable])
    with pytest.raises(ValueError, match="without an artifact list"):
        post_body(['{"artifacts":[]}', validated])


def test_a_validated_p_value_is_spelled_as_the_deployed_server_spells_it() -> None:
    # Python's float repr: msgspec's encoder would write 0.00001 and 1e-7.
    assert encode_body({"p_value": 1e-05, "q": 3e-07, "name": "é"}) == b'{"p_value":1e-05,"q":3e-07,"name":"\\u00e9"}'
