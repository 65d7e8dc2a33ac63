"""`pow/init/generate` and `pow/generate` bodies, as the API node's Go client writes them, read into the gRPC
requests PocService and ValidationService take and through the same checks (server.poc.batches.round_params): only the
HTTP API's own rules (the nonce set, the queue bound) are checked in server.http."""

from __future__ import annotations

import json
import re
import uuid

import pytest

from engine_ext.consensus import DEFAULT_K
from server.core.errors import ServiceError
from server.http.errors import HttpError, error_response, http_error_of
from server.http.json_body import parse_body
from server.http.options import FraudThreshold
from server.http.pow_models import (
    BackendError,
    BackendResult,
    GenerateBody,
    GenerateQueued,
    InitGenerateBody,
    InitGenerateResponse,
)
from server.http.pow_requests import (
    FLEET_P_VALUE_THRESHOLD,
    MAX_QUEUED_NONCES,
    new_request_id,
    require_queue_room,
    start_round_request,
    validation_request,
)
from server.poc.batches.round_params import DEFAULT_BATCH_SIZE, PocLimits, round_parameters

LIMITS = PocLimits(
    "Qwen/Qwen3-0.6B", max_model_len=4096, hidden_size=1024, max_num_batched_tokens=8192, max_num_seqs=64
)
# PoCInitGenerateRequestV2 as the Go client marshals it: no k_dim, no batch_size (spec section 1.1).
INIT = {
    "block_hash": "0xabc",
    "block_height": 1234,
    "public_key": "pk",
    "node_id": 2,
    "node_count": 5,
    "params": {"model": "Qwen/Qwen3-0.6B", "seq_len": 256},
    "url": "http://api-node:9100/v2/poc-batches/Qwen%252FQwen3-0.6B",
    "poc_stronger_rng": True,
}
VECTOR = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
GENERATE = {
    **{key: value for key, value in INIT.items() if key != "poc_stronger_rng"},
    "nonces": [7, 3, 11],
    "validation": {"artifacts": [{"nonce": n, "vector_b64": VECTOR} for n in (3, 7, 11)]},
    "stat_test": {"dist_threshold": 0.4, "p_mismatch": 0.1, "p_value_threshold": 0.05},
}


def body_of(model, value: dict):
    return parse_body(model, json.dumps(value).encode())


def rendered(error: HttpError) -> tuple[int, dict]:
    response = error_response(error)
    return response.status_code, json.loads(response.body)["error"]


def test_init_generate_becomes_the_start_round_request_with_the_deployed_defaults() -> None:
    params = round_parameters(start_round_request(body_of(InitGenerateBody, INIT)), LIMITS)
    assert (params.node_id, params.node_count, params.group_id, params.group_count) == (2, 5, 0, 1)
    assert params.artifacts.block_hash == "0xabc" and params.artifacts.public_key == "pk"
    assert params.artifacts.seq_len == 256 and params.artifacts.stronger_rng
    assert params.artifacts.k_dim == DEFAULT_K == 12
    assert params.batch_size == DEFAULT_BATCH_SIZE and params.block_height == 1234
    assert params.callback_url == INIT["url"] and params.model == "Qwen/Qwen3-0.6B"
    # Fields the API node may add are ignored; a batch size given is kept.
    extended = {**INIT, "batch_size": 8, "group_id": 3, "something_new": [1]}
    assert round_parameters(start_round_request(body_of(InitGenerateBody, extended)), LIMITS).batch_size == 8


@pytest.mark.parametrize(
    ("change", "param"),
    [
        ({"params": {"model": "Qwen/Qwen3-0.6B", "seq_len": 256, "decode": True}}, "params.decode"),
        ({"params": {"model": "Qwen/Qwen3-0.6B", "seq_len": "256"}}, "params.seq_len"),
        ({"params": {"model": "Qwen/Qwen3-0.6B"}}, "params.seq_len"),
        ({"node_id": 2**31}, "node_id"),
        ({"block_height": 2**63}, "block_height"),
        ({"node_count": 5.0}, "node_count"),
        ({"public_key": None}, "public_key"),
        ({"poc_stronger_rng": "true"}, "poc_stronger_rng"),
    ],
)
def test_a_body_that_no_grpc_request_could_hold_is_422_naming_the_field(change: dict, param: str) -> None:
    with pytest.raises(HttpError) as refused:
        body_of(InitGenerateBody, {**INIT, **change})
    assert rendered(refused.value)[0] == 422 and refused.value.param == param


def test_init_generate_for_another_model_is_409_as_the_deployed_plugin_answers() -> None:
    body = body_of(InitGenerateBody, {**INIT, "params": {"model": "other/model", "seq_len": 256}})
    with pytest.raises(ServiceError) as refused:
        round_parameters(start_round_request(body), LIMITS)
    status, error = rendered(http_error_of(refused.value))
    assert status == 409 and (error["type"], error["param"]) == ("MODEL_MISMATCH", "params.model")


def test_init_generate_values_the_shared_checks_refuse_are_400() -> None:
    body = body_of(InitGenerateBody, {**INIT, "node_id": 5})
    with pytest.raises(ServiceError) as refused:
        round_parameters(start_round_request(body), LIMITS)
    status, error = rendered(http_error_of(refused.value))
    assert status == 400 and error["param"] == "node_id"


def test_a_validation_job_becomes_the_validate_poc_artifacts_request_with_the_fleet_threshold() -> None:
    body = body_of(GenerateBody, GENERATE)
    assert not body.wait
    fleet = validation_request(body, "8080:job", FraudThreshold.FLEET)
    assert [(claim.nonce, claim.vector_b64) for claim in fleet.artifacts] == [(3, VECTOR), (7, VECTOR), (11, VECTOR)]
    assert fleet.request_id == "8080:job" and fleet.callback_url == GENERATE["url"] and fleet.node_id == 2
    assert (fleet.stat_test.dist_threshold, fleet.stat_test.p_mismatch) == (0.4, 0.1)
    assert fleet.stat_test.p_value_threshold == FLEET_P_VALUE_THRESHOLD == 0.01
    assert validation_request(body, "8080:job", FraudThreshold.CALLER).stat_test.p_value_threshold == 0.05
    # A field the API node left out (omitempty) stays unset for the shared check to name.
    partial = body_of(GenerateBody, {**GENERATE, "stat_test": {"p_mismatch": 0.1}})
    request = validation_request(partial, "8080:job", FraudThreshold.CALLER)
    assert not request.stat_test.HasField("dist_threshold") and not request.stat_test.HasField("p_value_threshold")


@pytest.mark.parametrize(
    ("nonces", "claimed"),
    [([7, 3, 11, 12], (3, 7, 11)), ([7, 3], (3, 7, 11)), ([1, 2, 3], (3, 7, 11))],
)
def test_a_validation_job_whose_artifacts_are_not_its_nonces_is_400(nonces: list[int], claimed: tuple) -> None:
    value = {
        **GENERATE,
        "nonces": nonces,
        "validation": {"artifacts": [{"nonce": n, "vector_b64": VECTOR} for n in claimed]},
    }
    with pytest.raises(HttpError) as refused:
        validation_request(body_of(GenerateBody, value), "8080:job", FraudThreshold.FLEET)
    status, error = rendered(refused.value)
    assert status == 400 and (error["type"], error["param"]) == ("NONCE_SET_MISMATCH", "validation.artifacts")


def test_the_nonce_sets_compare_as_sets_as_the_deployed_plugin_compares_them() -> None:
    value = {**GENERATE, "nonces": [7, 3, 11, 3]}
    assert len(validation_request(body_of(GenerateBody, value), "8080:job", FraudThreshold.FLEET).artifacts) == 3


def test_the_generate_queue_holds_at_most_100000_nonces() -> None:
    require_queue_room(0, MAX_QUEUED_NONCES)
    require_queue_room(MAX_QUEUED_NONCES - 200, 200)
    with pytest.raises(HttpError) as refused:
        require_queue_room(MAX_QUEUED_NONCES - 199, 200)
    status, error = rendered(refused.value)
    assert MAX_QUEUED_NONCES == 100_000 and status == 429 and error["type"] == "QUEUE_FULL"


def test_a_queued_job_is_answered_with_a_port_and_uuid_id() -> None:
    request_id = new_request_id(8080)
    port, _, job = request_id.partition(":")
    assert port == "8080" and uuid.UUID(job) and re.fullmatch(r"8080:[0-9a-f-]{36}", request_id)
    assert new_request_id(8080) != request_id
    answer = GenerateQueued(request_id=request_id, queued_count=3).model_dump()
    assert answer == {"status": "queued", "request_id": request_id, "queued_count": 3}


def test_init_generate_answers_with_the_fields_the_go_client_reads() -> None:
    answer = InitGenerateResponse(
        status="OK", backends=2, n_groups=2, results=[BackendResult(port=8080, status="OK")], errors=None
    ).model_dump()
    assert answer == {
        "status": "OK",
        "backends": 2,
        "n_groups": 2,
        "results": [{"port": 8080, "status": "OK"}],
        "errors": None,
    }
    assert BackendError(port=8080, error="Already generating").model_dump() == {
        "port": 8080,
        "error": "Already generating",
    }
