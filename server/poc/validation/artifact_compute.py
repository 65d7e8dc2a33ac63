"""Artifacts of an explicit nonce list (PocService.ComputeArtifacts, and the HTTP API's `generate` without
`validation`): the request checked once, its nonces cut into batches, the batches spread over the engine instances
(server.poc.batches.spread) and each batch's outcomes split into the artifacts computed and the nonces that have none."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from contextlib import aclosing
from dataclasses import dataclass

from gonka.mlnode.v1 import poc_pb2
from server.core.instances import EngineInstance
from server.poc.batches.batch_runner import KvBlockNotes
from server.poc.batches.outcomes import SplitBatch, split_outcomes
from server.poc.batches.round_params import (
    ArtifactParams,
    PocLimits,
    artifact_params,
    batch_size_of,
    nonce_list,
    require_poc_enabled,
)
from server.poc.batches.spread import spread_batches

MAX_COMPUTE_NONCES = 100_000


@dataclass(frozen=True)
class ComputePlan:
    params: ArtifactParams
    batches: list[list[int]]


def compute_plan(request: poc_pb2.ComputeArtifactsRequest, limits: PocLimits) -> ComputePlan:
    """The request's checks (a ServiceError names the offending field), before any engine work."""
    require_poc_enabled(limits)
    params = artifact_params(request.block_hash, request.public_key, request, request.stronger_rng, limits)
    batch_size = batch_size_of(request, params.seq_len, limits)
    nonces = nonce_list(list(request.nonces), "nonces", MAX_COMPUTE_NONCES)
    return ComputePlan(params, [nonces[start : start + batch_size] for start in range(0, len(nonces), batch_size)])


async def compute_artifacts(
    plan: ComputePlan, instances: Sequence[EngineInstance], notes: KvBlockNotes
) -> AsyncGenerator[tuple[EngineInstance, SplitBatch], None]:
    """Each batch as it was run (a batch split for want of KV blocks comes in pieces), in the list's order."""
    async with aclosing(spread_batches(instances, plan.params, plan.batches, notes)) as computed:
        async for instance, pieces in computed:
            for nonces, result in pieces:
                yield instance, split_outcomes(nonces, result, plan.params.k_dim)
