"""`pow/init/generate` and `pow/generate` bodies as the gRPC requests they stand for: a mining round is a
PocService StartRoundRequest, a validation job a ValidationService ValidatePocArtifactsRequest and any other
generate job a PocService ComputeArtifactsRequest, read by the same checks (server.poc.batches.round_params,
server.poc.validation.artifact_validation, server.poc.validation.artifact_compute); only what the HTTP API adds is checked here: the nonce
set of a validation job (400), and the bound on queued nonces (429), as the deployed plugin refuses them."""

from __future__ import annotations

import uuid

from gonka.mlnode.v1 import poc_pb2
from gonka.mlnode.v1 import validation_pb2 as vpb
from server.http.errors import HttpError
from server.http.options import FraudThreshold
from server.http.pow_models import GenerateBody, InitGenerateBody, PocParamsBody

# The deployed plugin's bound on the nonces its generate queue holds (P poc/generate_queue.py).
MAX_QUEUED_NONCES = 100_000
# The deployed node's fraud decision, whatever the API node sends (poc-v2-models.md section 6).
FLEET_P_VALUE_THRESHOLD = 0.01


def start_round_request(body: InitGenerateBody) -> poc_pb2.StartRoundRequest:
    request = poc_pb2.StartRoundRequest(
        block_hash=body.block_hash,
        block_height=body.block_height,
        public_key=body.public_key,
        node_id=body.node_id,
        node_count=body.node_count,
        params=_params(body.params),
        stronger_rng=body.poc_stronger_rng,
        callback_url=body.url,
    )
    if body.batch_size is not None:
        request.batch_size = body.batch_size
    return request


def validation_request(
    body: GenerateBody, request_id: str, threshold: FraudThreshold
) -> vpb.ValidatePocArtifactsRequest:
    """A `generate` that carries `validation`: its claims, judged as ValidatePocArtifacts judges them."""
    if body.validation is None:
        raise ValueError("a generate without validation computes artifacts; it is no validation job")
    require_matching_nonces(body)
    request = vpb.ValidatePocArtifactsRequest(
        block_hash=body.block_hash,
        block_height=body.block_height,
        public_key=body.public_key,
        node_id=body.node_id,
        params=_params(body.params),
        stronger_rng=body.poc_stronger_rng,
        artifacts=[vpb.ClaimedArtifact(nonce=a.nonce, vector_b64=a.vector_b64) for a in body.validation.artifacts],
        callback_url=body.url,
        request_id=request_id,
    )
    if body.batch_size is not None:
        request.batch_size = body.batch_size
    stat_test = body.stat_test
    if stat_test is not None:
        # Unset fields stay unset: the shared check names the missing one.
        for name in ("dist_threshold", "p_mismatch"):
            value = getattr(stat_test, name)
            if value is not None:
                setattr(request.stat_test, name, value)
        p_value = FLEET_P_VALUE_THRESHOLD if threshold is FraudThreshold.FLEET else stat_test.p_value_threshold
        if p_value is not None:
            request.stat_test.p_value_threshold = p_value
    return request


def compute_request(body: GenerateBody) -> poc_pb2.ComputeArtifactsRequest:
    """A `generate` without `validation`: the artifacts of its nonces, as ComputeArtifacts computes them."""
    request = poc_pb2.ComputeArtifactsRequest(
        block_hash=body.block_hash,
        public_key=body.public_key,
        params=_params(body.params),
        stronger_rng=body.poc_stronger_rng,
        nonces=body.nonces,
    )
    if body.batch_size is not None:
        request.batch_size = body.batch_size
    return request


def require_matching_nonces(body: GenerateBody) -> None:
    """The deployed plugin's rule: the claimed artifacts are those of the listed nonces, no more, no fewer."""
    assert body.validation is not None
    claimed = {artifact.nonce for artifact in body.validation.artifacts}
    listed = set(body.nonces)
    if claimed != listed:
        missing, extra = sorted(listed - claimed), sorted(claimed - listed)
        raise HttpError(
            400,
            "NONCE_SET_MISMATCH",
            f"validation.artifacts must hold exactly the nonces listed in nonces: {len(missing)} listed without an "
            f"artifact (first {missing[:5]}), {len(extra)} artifacts of unlisted nonces (first {extra[:5]})",
            "validation.artifacts",
        )


def require_queue_room(queued: int, adding: int) -> None:
    """429 when `adding` more nonces would put more than MAX_QUEUED_NONCES in the generate queue."""
    if queued + adding > MAX_QUEUED_NONCES:
        raise HttpError(
            429,
            "QUEUE_FULL",
            f"the generate queue holds {queued} nonces; {adding} more would pass its bound of {MAX_QUEUED_NONCES}",
            "nonces",
        )


def new_request_id(port: int) -> str:
    """A job's id as the deployed node gives it: "{port}:{uuid}"."""
    return f"{port}:{uuid.uuid4()}"


def _params(params: PocParamsBody) -> poc_pb2.PocParams:
    message = poc_pb2.PocParams(model=params.model, seq_len=params.seq_len)
    if params.k_dim is not None:
        message.k_dim = params.k_dim
    return message
