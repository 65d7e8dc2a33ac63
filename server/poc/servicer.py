"""gonka.mlnode.v1.PocService: mining rounds, artifact subscriptions, artifacts of explicit nonces."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import aclosing

from grpc import aio

from gonka.mlnode.v1 import poc_pb2
from server.core.errors import ServiceError, abort_with, invalid_field
from server.core.instances import EngineInstances
from server.core.service_registration import decode_request
from server.poc.batches.batch_runner import KvBlockNotes
from server.poc.batches.outcomes import artifact_batch_message
from server.poc.batches.round_params import PocLimits, require_poc_enabled, round_parameters
from server.poc.fanout.artifact_hub import ArtifactHub, BatchEvent, EndEvent, EndReason, LostEvent, RoundNotFound
from server.poc.gate.admission import Admission
from server.poc.round.mining_round import MiningRound
from server.poc.round.round_control import RoundControl, round_not_found
from server.poc.validation.artifact_compute import compute_artifacts, compute_plan
from server.translation.engine_failures import engine_failure

END_REASONS = {
    EndReason.STOPPED: poc_pb2.SUBSCRIPTION_END_REASON_ROUND_STOPPED,
    EndReason.FAILED: poc_pb2.SUBSCRIPTION_END_REASON_ROUND_FAILED,
    EndReason.SHUTTING_DOWN: poc_pb2.SUBSCRIPTION_END_REASON_SERVER_SHUTTING_DOWN,
}


class PocServicer:
    def __init__(
        self,
        control: RoundControl,
        hub: ArtifactHub,
        instances: EngineInstances,
        limits: PocLimits,
        admission: Admission,
    ) -> None:
        self._control = control
        self._hub = hub
        self._instances = instances
        self._limits = limits
        self._admission = admission

    async def StartRound(self, raw: bytes, context: aio.ServicerContext) -> poc_pb2.StartRoundResponse:
        try:
            request = decode_request(poc_pb2.StartRoundRequest, raw)
            require_poc_enabled(self._limits)
            self._admission.require_open()
            mining = await self._control.start(round_parameters(request, self._limits))
            return poc_pb2.StartRoundResponse(status=self._status(mining))
        except Exception as error:
            await abort_with(context, engine_failure(error, None, self._admission))

    async def StopRound(self, raw: bytes, context: aio.ServicerContext) -> poc_pb2.StopRoundResponse:
        try:
            request = decode_request(poc_pb2.StopRoundRequest, raw)
            require_poc_enabled(self._limits)
            mining = await self._control.stop(request.round_id or None)
            return poc_pb2.StopRoundResponse(status=self._status(mining))
        except Exception as error:
            await abort_with(context, engine_failure(error, None, self._admission))

    async def GetRoundStatus(self, raw: bytes, context: aio.ServicerContext) -> poc_pb2.GetRoundStatusResponse:
        try:
            request = decode_request(poc_pb2.GetRoundStatusRequest, raw)
            require_poc_enabled(self._limits)
            return poc_pb2.GetRoundStatusResponse(status=self._status(self._control.round(request.round_id or None)))
        except Exception as error:
            await abort_with(context, engine_failure(error, None, self._admission))

    async def SubscribeArtifacts(
        self, raw: bytes, context: aio.ServicerContext
    ) -> AsyncIterator[poc_pb2.SubscribeArtifactsResponse]:
        failure: ServiceError | None = None
        try:
            request = decode_request(poc_pb2.SubscribeArtifactsRequest, raw)
            require_poc_enabled(self._limits)
            if request.after_sequence < 0:
                raise invalid_field("after_sequence", f"must be >= 0, got {request.after_sequence}")
            round_id = request.round_id or None
            events = self._hub.subscribe(round_id, request.after_sequence)
            round_id = round_id or self._hub.current_round_id()
            async with aclosing(events) as stream:
                async for event in stream:
                    yield _event_message(round_id or "", event)
        except RoundNotFound as error:
            failure = round_not_found(str(error), request.round_id)
        except Exception as error:  # never leave a stream without a status
            failure = engine_failure(error, None, self._admission)
        if failure is not None:
            await abort_with(context, failure)

    async def ComputeArtifacts(
        self, raw: bytes, context: aio.ServicerContext
    ) -> AsyncIterator[poc_pb2.ComputeArtifactsResponse]:
        failure: ServiceError | None = None
        try:
            request = decode_request(poc_pb2.ComputeArtifactsRequest, raw)
            require_poc_enabled(self._limits)
            self._admission.require_open()
            plan = compute_plan(request, self._limits)
            notes = KvBlockNotes()
            sequence = 0
            async with aclosing(compute_artifacts(plan, self._instances.require_available(), notes)) as computed:
                async for instance, split in computed:
                    sequence += 1
                    batch = artifact_batch_message(
                        sequence,
                        split.nonces,
                        split.vectors,
                        plan.params.k_dim,
                        split.failures,
                        instance=instance.index,
                    )
                    yield poc_pb2.ComputeArtifactsResponse(batch=batch, kv_blocks_note=notes.describe())
        except Exception as error:
            failure = engine_failure(error, None, self._admission)
        if failure is not None:
            await abort_with(context, failure)

    def _status(self, mining: MiningRound) -> poc_pb2.RoundStatus:
        status = mining.status()
        counts = self._control.callback_counts(mining.round_id)
        if counts is not None:
            status.callback.CopyFrom(
                poc_pb2.CallbackCounts(
                    delivered=counts.delivered,
                    pending=counts.pending,
                    spooled=counts.retrying,
                    given_up=counts.given_up,
                    failed_attempts=counts.failed_attempts,
                )
            )
        return status


def _event_message(round_id: str, event: object) -> poc_pb2.SubscribeArtifactsResponse:
    if isinstance(event, BatchEvent):
        batch = event.batch
        return poc_pb2.SubscribeArtifactsResponse(
            round_id=round_id,
            batch=artifact_batch_message(
                batch.sequence,
                batch.nonces,
                batch.vectors,
                batch.k_dim,
                batch.failures,
                group_id=batch.group_id,
                instance=batch.instance,
            ),
        )
    if isinstance(event, LostEvent):
        lost = poc_pb2.ArtifactsLost(
            first_missing_sequence=event.first_missing_sequence,
            last_missing_sequence=event.last_missing_sequence,
            batches=event.batches,
            artifacts=event.artifacts,
        )
        return poc_pb2.SubscribeArtifactsResponse(round_id=round_id, lost=lost)
    assert isinstance(event, EndEvent)
    end = poc_pb2.SubscriptionEnd(
        reason=END_REASONS[event.reason], detail=event.detail, last_sequence=event.last_sequence
    )
    return poc_pb2.SubscribeArtifactsResponse(round_id=round_id, end=end)
