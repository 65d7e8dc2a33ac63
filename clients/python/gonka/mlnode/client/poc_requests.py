"""Builds PocService and ValidatePocArtifacts requests from plain Python values.

Presence matters: an optional field left as None stays unset on the wire, so the server applies its
own default (k_dim 12, batch_size 32, node_count and group_count 1) rather than one copied here.
"""

from __future__ import annotations

from collections.abc import Iterable

from gonka.mlnode.v1 import poc_pb2
from gonka.mlnode.v1 import validation_pb2 as vpb

Claim = tuple[int, str | bytes]


def poc_params(model: str, seq_len: int, k_dim: int | None = None) -> poc_pb2.PocParams:
    params = poc_pb2.PocParams(model=model, seq_len=seq_len)
    if k_dim is not None:
        params.k_dim = k_dim
    return params


def start_round_request(
    *,
    block_hash: str,
    public_key: str,
    model: str,
    seq_len: int,
    k_dim: int | None = None,
    block_height: int = 0,
    node_id: int = 0,
    node_count: int | None = None,
    group_id: int = 0,
    group_count: int | None = None,
    batch_size: int | None = None,
    stronger_rng: bool = False,
    callback_url: str = "",
) -> poc_pb2.StartRoundRequest:
    request = poc_pb2.StartRoundRequest(
        block_hash=block_hash,
        block_height=block_height,
        public_key=public_key,
        node_id=node_id,
        # 0 is the wire's "unset" for these two (the server reads it as 1).
        node_count=node_count or 0,
        group_id=group_id,
        group_count=group_count or 0,
        params=poc_params(model, seq_len, k_dim),
        stronger_rng=stronger_rng,
        callback_url=callback_url,
    )
    if batch_size is not None:
        request.batch_size = batch_size
    return request


def compute_artifacts_request(
    *,
    block_hash: str,
    public_key: str,
    model: str,
    seq_len: int,
    nonces: Iterable[int],
    k_dim: int | None = None,
    batch_size: int | None = None,
    stronger_rng: bool = False,
) -> poc_pb2.ComputeArtifactsRequest:
    request = poc_pb2.ComputeArtifactsRequest(
        block_hash=block_hash,
        public_key=public_key,
        params=poc_params(model, seq_len, k_dim),
        stronger_rng=stronger_rng,
        nonces=list(nonces),
    )
    if batch_size is not None:
        request.batch_size = batch_size
    return request


def claimed_artifact(nonce: int, vector: str | bytes) -> vpb.ClaimedArtifact:
    """A str is the network's base64 (vector_b64); bytes are the 2k little-endian float16 bytes."""
    if isinstance(vector, str):
        return vpb.ClaimedArtifact(nonce=nonce, vector_b64=vector)
    if isinstance(vector, (bytes, bytearray, memoryview)):
        return vpb.ClaimedArtifact(nonce=nonce, vector_f16=bytes(vector))
    raise TypeError(f"nonce {nonce}: a claimed vector is a base64 str or float16 bytes, got {type(vector).__name__}")


def validate_poc_request(
    *,
    block_hash: str,
    public_key: str,
    model: str,
    seq_len: int,
    claims: Iterable[Claim],
    dist_threshold: float,
    p_mismatch: float,
    p_value_threshold: float,
    k_dim: int | None = None,
    stronger_rng: bool = False,
    block_height: int = 0,
    node_id: int = 0,
    batch_size: int | None = None,
    callback_url: str = "",
    request_id: str = "",
) -> vpb.ValidatePocArtifactsRequest:
    """The three thresholds have no defaults on purpose: the contract requires the caller's values
    (the network's for Qwen3-235B are 0.2, 0.1 and 0.05)."""
    request = vpb.ValidatePocArtifactsRequest(
        block_hash=block_hash,
        block_height=block_height,
        public_key=public_key,
        node_id=node_id,
        params=poc_params(model, seq_len, k_dim),
        stronger_rng=stronger_rng,
        artifacts=[claimed_artifact(nonce, vector) for nonce, vector in claims],
        stat_test=vpb.PocStatTest(
            dist_threshold=dist_threshold, p_mismatch=p_mismatch, p_value_threshold=p_value_threshold
        ),
        callback_url=callback_url,
        request_id=request_id,
    )
    if batch_size is not None:
        request.batch_size = batch_size
    return request
