"""Starts, stops and tracks mining rounds; owns the order of everything around a round. The one entry point
for a round's start, stop, status and subscription (the hub) whatever serves the PoC API.

Groups: with one engine instance the round mines the request's group_id of group_count. With several, the
server numbers the groups itself, as the deployed node does: the instances available at StartRound (those
that serve), in index order, are groups 0 .. n-1 of n; the others sit the round out.

Start: the round is registered (StopRound, GetRoundStatus, subscriptions and shutdown find it from here
on) and the gate closes (new inference refused) before the first await; then, in the round's own task,
the inference service goes NOT_SERVING, every inference request in flight is aborted on both output
paths, and only then is the first forward issued. StartRound answers once that is done. End (stop,
failure, nonces exhausted, shutdown): the forwards already issued return (in the engine, also past the
engine-call timeout), the gate opens, health flips back, subscribers get their final message, the
callback flushes. An ended round stays readable for the hub's retention time (--poc-retention-s), for
status and subscriptions alike, then is forgotten.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from collections.abc import Callable
from typing import Protocol

import grpc
from grpc_health.v1 import health_pb2

from gonka.mlnode.v1 import poc_pb2
from server.core.errors import Reason, ServiceError, echoed
from server.core.instances import EngineInstances
from server.poc.batches.round_params import RoundParameters
from server.poc.delivery.callback_store import RoundCounts
from server.poc.fanout.artifact_hub import ArtifactHub, EndReason
from server.poc.gate.priority_gate import PriorityGate
from server.poc.round.mining_round import ArtifactSink, MiningGroup, MiningRound, RoundState

log = logging.getLogger(__name__)


class HealthSetter(Protocol):
    async def set(self, service: str, status: health_pb2.HealthCheckResponse.ServingStatus) -> None: ...


class RoundCallback(ArtifactSink, Protocol):
    """The delivery of the round's artifacts (server.poc.delivery.callbacks.ArtifactCallback)."""

    def finish(self) -> None: ...
    def counts(self) -> RoundCounts | None: ...


CallbackFactory = Callable[[str, RoundParameters], RoundCallback | None]


class RoundObserver(Protocol):
    """Told when a round starts and when it ends (server.metrics counts rounds and nonces)."""

    def round_started(self, mining: MiningRound) -> None: ...
    def round_ended(self, mining: MiningRound) -> None: ...


class RoundControl:
    def __init__(
        self,
        instances: EngineInstances,
        gate: PriorityGate,
        hub: ArtifactHub,
        health: HealthSetter,
        gated_services: tuple[str, ...],
        poc_service: str,
        callback_factory: CallbackFactory,
        may_resume_inference: Callable[[], bool],
    ) -> None:
        self._instances = instances
        self._gate = gate
        self._hub = hub
        self._health = health
        self._gated_services = gated_services
        # NOT_SERVING after a round failed (the engine produced non-finite values or an engine call
        # failed), until a round starts again: an operator's health check sees it.
        self._poc_service = poc_service
        self._callback_factory = callback_factory
        self._may_resume_inference = may_resume_inference
        self._rounds: dict[str, tuple[MiningRound, RoundCallback | None, asyncio.Task[None]]] = {}
        self._running: MiningRound | None = None
        # Set while no round runs (server.http.generate_queue waits on it before each job).
        self._idle = asyncio.Event()
        self._idle.set()
        self._latest: str | None = None
        self._observers: list[RoundObserver] = []

    def add_observer(self, observer: RoundObserver) -> None:
        self._observers.append(observer)

    @property
    def running(self) -> MiningRound | None:
        return self._running

    async def wait_until_idle(self) -> None:
        """Returns once no round runs (at once when none does)."""
        while self._running is not None:
            await self._idle.wait()

    async def start(self, params: RoundParameters, callback_factory: CallbackFactory | None = None) -> MiningRound:
        """`callback_factory`: where this round's artifacts go instead of the server's own (the HTTP API's pull
        stream, for a round the API node gave no URL)."""
        # No await before the round is registered: a StopRound, a status read or a shutdown at any
        # instant of StartRound finds the round, and two StartRounds cannot both find none running.
        if self._running is not None:
            raise _already_running(self._running)
        params, groups = self._groups(params)
        round_id = uuid.uuid4().hex
        callback = (callback_factory or self._callback_factory)(round_id, params)
        sinks = [callback] if callback is not None else []
        mining = MiningRound(round_id, params, groups, self._hub, sinks)
        self._hub.open_round(round_id, params.artifacts.k_dim)
        self._gate.close(round_id)
        self._running = mining
        self._idle.clear()
        self._latest = round_id
        started = asyncio.get_running_loop().create_future()
        # Read here even when the StartRound that waits for it has gone away.
        started.add_done_callback(lambda future: future.cancelled() or future.exception())
        task = asyncio.create_task(self._drive(mining, callback, started), name=f"poc-round-{round_id}")
        self._rounds[round_id] = (mining, callback, task)
        for observer in self._observers:
            observer.round_started(mining)
        # shield: a StartRound caller that goes away does not undo the start.
        await asyncio.shield(started)
        return mining

    def _groups(self, params: RoundParameters) -> tuple[RoundParameters, list[MiningGroup]]:
        """The round's groups, and its parameters as the round runs them (group_count: how many groups)."""
        available = self._instances.require_available()
        if not self._instances.assigns_groups:
            return params, [MiningGroup(params.group_id, available[0])]
        params = dataclasses.replace(params, group_id=0, group_count=len(available))
        return params, [MiningGroup(group_id, instance) for group_id, instance in enumerate(available)]

    async def stop(self, round_id: str | None) -> MiningRound:
        mining, _, task = self._entry(round_id)
        mining.request_stop()
        # shield: a StopRound caller that goes away does not cancel the round's wind-down.
        await asyncio.shield(task)
        return mining

    def round(self, round_id: str | None) -> MiningRound:
        return self._entry(round_id)[0]

    def callback_counts(self, round_id: str) -> RoundCounts | None:
        """The round's callback deliveries; None without a callback_url, for a round whose artifacts go to the pull
        stream, or for a round just forgotten (which --poc-retention-s 0 allows between a StopRound's end and its
        answer)."""
        entry = self._rounds.get(round_id)
        callback = None if entry is None else entry[1]
        return None if callback is None else callback.counts()

    async def shutdown(self) -> None:
        """Stops the running round (its subscribers are told the server is shutting down), waiting for the
        engine's answer to its last forward at most the engine-call timeout (a stuck engine must not keep
        the process up; what the round published is in the callback store already). The callbacks' bounded
        flush is the sender's own shutdown."""
        if self._running is not None:
            running = self._running
            running.request_stop()
            task = self._rounds[running.round_id][2]
            await asyncio.wait({task}, timeout=self._instances.call_timeout_seconds)
            if not task.done():
                log.warning(
                    "round %s: the engine has not answered its last forward; shutting down without it", running.round_id
                )
                task.cancel()
                await asyncio.wait({task})
        self._hub.shutdown("the server is shutting down")

    def _entry(self, round_id: str | None) -> tuple[MiningRound, RoundCallback | None, asyncio.Task[None]]:
        self._forget_expired()
        wanted = round_id or (self._running.round_id if self._running is not None else self._latest)
        if wanted is None or wanted not in self._rounds:
            raise round_not_found(
                f"round_id: no PoC round {echoed(round_id)} is running or retained"
                if round_id
                else "no PoC round is running or retained on this server",
                round_id,
            )
        return self._rounds[wanted]

    def _forget_expired(self) -> None:
        """Ended rounds go when the hub drops them (its retention time): one rule for status and subscriptions."""
        self._hub.drop_expired()
        for round_id in [
            round_id for round_id, (_, _, task) in self._rounds.items() if task.done() and not self._hub.holds(round_id)
        ]:
            del self._rounds[round_id]

    async def _reopen(self) -> None:
        """Inference admitted again (unless the server is shutting down)."""
        self._running = None
        self._idle.set()
        if self._may_resume_inference():
            self._instances.resume()
        self._gate.open()
        for service in self._gated_services:
            await self._health.set(service, health_pb2.HealthCheckResponse.SERVING)

    async def _prepare(self, mining: MiningRound) -> None:
        for service in self._gated_services:
            await self._health.set(service, health_pb2.HealthCheckResponse.NOT_SERVING)
        mining.preempted_streams = await self._instances.pause()
        await self._health.set(self._poc_service, health_pb2.HealthCheckResponse.SERVING)

    async def _drive(self, mining: MiningRound, callback: RoundCallback | None, started: asyncio.Future[None]) -> None:
        try:
            try:
                await self._prepare(mining)
            except Exception as error:
                # No forward was issued: the round ends FAILED, everything is handed back below.
                mining.fail_to_start(error)
                log.error("round %s could not start: %s", mining.round_id, mining.failure)
                started.set_exception(error)
            else:
                started.set_result(None)
                log.info("round %s started (%d inference streams preempted)", mining.round_id, mining.preempted_streams)
                await mining.run()
        finally:
            # Every forward the round issued has returned (MiningRound.run settles them). Observers
            # hear of the end while the round is still the running one, with no await in between:
            # one that reads both (server.metrics) never sees its nonces twice or not at all.
            if not started.done():
                started.cancel()
            for observer in self._observers:
                observer.round_ended(mining)
            await self._reopen()
            if mining.state is RoundState.FAILED:
                await self._health.set(self._poc_service, health_pb2.HealthCheckResponse.NOT_SERVING)
            reason = EndReason.FAILED if mining.state is RoundState.FAILED else EndReason.STOPPED
            if not self._may_resume_inference():
                reason = EndReason.SHUTTING_DOWN if reason is EndReason.STOPPED else reason
            self._hub.close_round(mining.round_id, reason, mining.failure)
            if callback is not None:
                # What is pending goes at once; the server's shutdown bounds it, the store keeps the rest.
                callback.finish()
            log.info(
                "round %s ended: %s, %d nonces; %s",
                mining.round_id,
                mining.state.name,
                mining.nonces_produced,
                mining.timing_summary(),
            )


def round_not_found(message: str, round_id: str | None) -> ServiceError:
    return ServiceError(
        grpc.StatusCode.NOT_FOUND, Reason.ROUND_NOT_FOUND, message, field="round_id" if round_id else None
    )


def _already_running(running: MiningRound) -> ServiceError:
    params = running.params
    identity = {
        "round_id": running.round_id,
        "block_hash": params.artifacts.block_hash,
        "block_height": str(params.block_height),
        "public_key": params.artifacts.public_key,
        "node_id": str(params.node_id),
        "group_id": str(params.group_id),
        "state": poc_pb2.RoundState.Name(running.state.value),
    }
    return ServiceError(
        grpc.StatusCode.ALREADY_EXISTS,
        Reason.ROUND_ALREADY_RUNNING,
        f"a PoC round is already running (round {running.round_id}, block {params.block_height})",
        metadata=identity,
    )
