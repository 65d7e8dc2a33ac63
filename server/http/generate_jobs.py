"""What a `pow/generate` job computes (spec section 1.2), through the paths the gRPC services run, never a copy:

- with `validation`: ValidatePocArtifacts' own `validate_poc_artifacts`, whose verdict goes to `{url}/validated`
  in the deployed body through the server's durable callback store and sender (PocComponents.deliver_validated);
- without it: ComputeArtifacts' own `compute_artifacts`; with `url` the artifacts go to `{url}/generated`, with
  the job's `request_id`, through the same store.
Without `url`, both go to the pull stream where it is served (server.poc.delivery.callback_stream), as the deployed node
points such jobs at its local sink.

The job's result (`GET generate/{id}`) is the `/validated` body, or the artifacts computed."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any, Protocol

from gonka.mlnode.v1 import poc_pb2
from gonka.mlnode.v1 import validation_pb2 as vpb
from server.core.instances import EngineInstances
from server.poc.batches.artifacts import ArtifactEntry, artifact_entries
from server.poc.batches.batch_runner import KvBlockNotes
from server.poc.batches.round_params import PocLimits
from server.poc.delivery.callbacks import CallbackIdentity
from server.poc.delivery.validated import ValidatedBody
from server.poc.validation.artifact_compute import compute_artifacts, compute_plan
from server.poc.validation.artifact_validation import ValidatedCallback, validate_poc_artifacts, validated_body


class GeneratedSink(Protocol):
    """A job's artifacts for `{url}/generated` (server.poc.delivery.callbacks.ArtifactCallback)."""

    def add(self, nonces: Sequence[int], vectors: bytes) -> None: ...
    def finish(self) -> None: ...


# (url, identity, k_dim, request_id) -> the job's sink (PocComponents.job_callback).
GeneratedCallback = Callable[[str, CallbackIdentity, int, str], GeneratedSink]


@dataclass(frozen=True)
class JobEngine:
    """What the jobs compute with: the server's engine instances and PoC limits, and its callback deliveries."""

    instances: EngineInstances
    limits: PocLimits
    deliver_validated: ValidatedCallback
    generated_callback: GeneratedCallback


async def run_validation(
    request: vpb.ValidatePocArtifactsRequest,
    engine: JobEngine,
    unaddressed: Callable[[ValidatedBody], object] | None = None,
) -> ValidatedBody:
    """The verdict, delivered to `{callback_url}/validated` by validate_poc_artifacts itself; returned as that body.
    `unaddressed`: where the verdict goes when the request has no callback URL (the pull stream's sink)."""
    summary: vpb.PocValidationSummary | None = None
    responses = validate_poc_artifacts(
        request, engine.instances.require_available(), engine.limits, engine.deliver_validated
    )
    async with aclosing(responses) as stream:
        async for response in stream:
            if response.HasField("summary"):
                summary = response.summary
    assert summary is not None  # validate_poc_artifacts ends with it
    body = validated_body(request, summary)
    if unaddressed is not None and not request.callback_url:
        unaddressed(body)
    return body


async def run_computation(
    request: poc_pb2.ComputeArtifactsRequest,
    sink_of: Callable[[int], GeneratedSink] | None,
    engine: JobEngine,
) -> dict[str, Any]:
    """The artifacts of the request's nonces, each batch to the sink `sink_of(k_dim)` makes as it is computed (None:
    no callbacks)."""
    plan = compute_plan(request, engine.limits)
    k_dim = plan.params.k_dim
    callback = None if sink_of is None else sink_of(k_dim)
    artifacts: list[ArtifactEntry] = []
    not_computable: list[int] = []
    async with aclosing(compute_artifacts(plan, engine.instances.require_available(), KvBlockNotes())) as computed:
        async for _instance, split in computed:
            if callback is not None and split.nonces:
                callback.add(split.nonces, split.vectors)
            artifacts += artifact_entries(split.nonces, split.vectors, k_dim)
            not_computable += [failure.nonce for failure in split.failures]
    if callback is not None:
        callback.finish()
    return {"artifacts": artifacts, "not_computable": not_computable}
