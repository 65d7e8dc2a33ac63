"""PoC parameters from the wire, checked against what this engine can run, with defaults applied.

Every refusal names the field: INVALID_ARGUMENT for impossible values, FAILED_PRECONDITION when the
request names another model than the served one.
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc

from engine_ext.consensus import DEFAULT_K, INT32_MAX
from engine_ext.poc.batch_caps import PocBatchCap
from gonka.mlnode.v1 import poc_pb2
from gonka.mlnode.v1 import validation_pb2 as vpb
from server.core.errors import Reason, ServiceError, echoed, invalid_field
from server.poc.batches.callback_url import callback_url_problem

DEFAULT_BATCH_SIZE = 32


@dataclass(frozen=True)
class PocLimits:
    served_model_name: str
    max_model_len: int
    hidden_size: int
    # The engine's per-step token budget: a batch's B x S must fit it (the size vLLM profiled;
    # on GPU, workspace-backed kernels assert beyond it).
    max_num_batched_tokens: int
    # The most sequences in one engine step: a batch's B must fit it (FlashAttention 3's scheduler metadata
    # buffer on a GPU is sized by it; a larger batch failed there).
    max_num_seqs: int
    # A bound on B that the engine's configuration imposes, and why (engine_ext.poc.batch_caps); None: none.
    batch_cap: PocBatchCap | None = None
    # The server's engine instances: with several, the server numbers the nonce groups itself
    # (server.poc.round.round_control) and a request that sets group_id or group_count is refused.
    instances: int = 1
    # False: the server runs with PoC off (--poc-forward off) and refuses every PoC call.
    enabled: bool = True


def require_poc_enabled(limits: PocLimits) -> None:
    if not limits.enabled:
        raise ServiceError(
            grpc.StatusCode.FAILED_PRECONDITION,
            Reason.POC_DISABLED,
            "PoC is off on this server (--poc-forward off): it serves inference only",
        )


@dataclass(frozen=True)
class ArtifactParams:
    """What an artifact depends on besides its nonce."""

    block_hash: str
    public_key: str
    seq_len: int
    k_dim: int
    stronger_rng: bool


@dataclass(frozen=True)
class RoundParameters:
    artifacts: ArtifactParams
    block_height: int
    node_id: int
    node_count: int
    group_id: int
    group_count: int
    batch_size: int
    callback_url: str
    model: str

    def to_proto(self) -> poc_pb2.StartRoundRequest:
        return poc_pb2.StartRoundRequest(
            block_hash=self.artifacts.block_hash,
            block_height=self.block_height,
            public_key=self.artifacts.public_key,
            node_id=self.node_id,
            node_count=self.node_count,
            group_id=self.group_id,
            group_count=self.group_count,
            params=poc_pb2.PocParams(model=self.model, seq_len=self.artifacts.seq_len, k_dim=self.artifacts.k_dim),
            batch_size=self.batch_size,
            stronger_rng=self.artifacts.stronger_rng,
            callback_url=self.callback_url,
        )


# The requests that carry a round's or a computation's PoC parameters (`params`, `batch_size`).
PocRequest = poc_pb2.StartRoundRequest | poc_pb2.ComputeArtifactsRequest | vpb.ValidatePocArtifactsRequest


def round_parameters(request: poc_pb2.StartRoundRequest, limits: PocLimits) -> RoundParameters:
    artifacts = artifact_params(request.block_hash, request.public_key, request, request.stronger_rng, limits)
    instances = limits.instances
    if instances > 1:
        for name in ("group_id", "group_count"):
            if getattr(request, name):
                raise invalid_field(
                    name,
                    f"is set by this server, which runs {instances} engine instances, one nonce group each (the groups "
                    f"are the instances that serve at StartRound); leave group_id and group_count unset, got {name}="
                    f"{getattr(request, name)}",
                )
    node_count = request.node_count or 1
    group_count = request.group_count or 1
    if request.node_count < 0:
        raise invalid_field("node_count", f"must be >= 1, got {request.node_count}")
    if request.group_count < 0:
        raise invalid_field("group_count", f"must be >= 1, got {request.group_count}")
    if not 0 <= request.node_id < node_count:
        raise invalid_field("node_id", f"must be in [0, node_count={node_count}), got {request.node_id}")
    if not 0 <= request.group_id < group_count:
        raise invalid_field("group_id", f"must be in [0, group_count={group_count}), got {request.group_id}")
    if request.block_height < 0:
        raise invalid_field("block_height", f"must be >= 0, got {request.block_height}")
    return RoundParameters(
        artifacts=artifacts,
        block_height=request.block_height,
        node_id=request.node_id,
        node_count=node_count,
        group_id=request.group_id,
        group_count=group_count,
        batch_size=batch_size_of(request, artifacts.seq_len, limits),
        callback_url=callback_url_of(request.callback_url),
        model=request.params.model,
    )


def artifact_params(
    block_hash: str, public_key: str, request: PocRequest, stronger_rng: bool, limits: PocLimits
) -> ArtifactParams:
    """From a request holding `params` (PocParams): the model, seq_len and k_dim checked."""
    if not block_hash:
        raise invalid_field("block_hash", "is required")
    if not public_key:
        raise invalid_field("public_key", "is required")
    if not request.HasField("params"):
        raise invalid_field("params", "is required (model, seq_len, k_dim)")
    params = request.params
    if params.model != limits.served_model_name:
        raise ServiceError(
            grpc.StatusCode.FAILED_PRECONDITION,
            Reason.MODEL_MISMATCH,
            f"params.model: this node serves {limits.served_model_name!r}, not {echoed(params.model)}",
            field="params.model",
        )
    if not 1 <= params.seq_len <= limits.max_model_len:
        raise invalid_field(
            "params.seq_len", f"must be in [1, max context {limits.max_model_len}], got {params.seq_len}"
        )
    k_dim = params.k_dim if params.HasField("k_dim") else DEFAULT_K
    if not 2 <= k_dim <= limits.hidden_size:
        raise invalid_field("params.k_dim", f"must be in [2, hidden size {limits.hidden_size}], got {k_dim}")
    return ArtifactParams(block_hash, public_key, params.seq_len, k_dim, stronger_rng)


def batch_size_of(request: PocRequest, seq_len: int, limits: PocLimits) -> int:
    batch_size = request.batch_size if request.HasField("batch_size") else min(DEFAULT_BATCH_SIZE, limits.max_num_seqs)
    if batch_size < 1:
        raise invalid_field("batch_size", f"must be >= 1, got {batch_size}")
    if batch_size * seq_len > limits.max_num_batched_tokens:
        raise invalid_field(
            "batch_size",
            f"batch_size x params.seq_len = {batch_size * seq_len} exceeds the engine's max_num_batched_tokens "
            f"({limits.max_num_batched_tokens}); lower one, or start the server with a larger --max-num-batched-tokens",
        )
    if batch_size > limits.max_num_seqs:
        raise invalid_field(
            "batch_size",
            f"must be at most the engine's max_num_seqs ({limits.max_num_seqs}), got {batch_size}; lower it, or start "
            "the server with a larger --max-num-seqs",
        )
    cap = limits.batch_cap
    if cap is not None and batch_size > cap.max_batch_size:
        raise invalid_field("batch_size", f"must be at most {cap.max_batch_size} with {cap.reason}; got {batch_size}")
    return batch_size


def callback_url_of(url: str) -> str:
    """The callback URL without trailing slashes; empty for none."""
    if not url:
        return ""
    problem = callback_url_problem(url)
    if problem is not None:
        raise invalid_field("callback_url", f"{problem}, got {echoed(url)}")
    return url.rstrip("/")


def nonce_list(nonces: list[int], field: str, limit: int) -> list[int]:
    if not nonces:
        raise invalid_field(field, "must hold at least one nonce")
    if len(nonces) > limit:
        raise invalid_field(field, f"at most {limit} per call, got {len(nonces)}")
    for nonce in nonces:
        if not -INT32_MAX - 1 <= nonce <= INT32_MAX:
            raise invalid_field(field, f"nonces are int32 on the chain, got {nonce}")
    return list(nonces)
