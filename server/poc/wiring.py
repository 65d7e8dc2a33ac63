"""Everything PoC in the server process, built once and passed explicitly: the gate, the artifact hub,
the round control, the callback store's sender and the servicer; its flags; its shutdown. (The batch
runners are the engine instances' own: server.core.instances.)"""

from __future__ import annotations

import logging

import aiohttp

from engine_ext.model_facts import ModelFacts
from server.core.instances import EngineInstances
from server.poc.batches.round_params import PocLimits, RoundParameters
from server.poc.delivery.callback_sender import SETTLED_KEPT_SECONDS, CallbackSender
from server.poc.delivery.callback_store import CallbackStore
from server.poc.delivery.callbacks import ArtifactCallback, CallbackIdentity
from server.poc.delivery.validated import ValidatedBody, validated_url
from server.poc.fanout.artifact_hub import ArtifactHub
from server.poc.gate.admission import Admission
from server.poc.options import PocOptions
from server.poc.round.round_control import HealthSetter, RoundControl
from server.poc.servicer import PocServicer

log = logging.getLogger(__name__)


class PocComponents:
    def __init__(
        self,
        instances: EngineInstances,
        limits: PocLimits,
        admission: Admission,
        health: HealthSetter,
        gated_services: tuple[str, ...],
        poc_service: str,
        options: PocOptions,
        store: CallbackStore,
    ) -> None:
        self.options = options
        self.limits = limits
        self.gate = admission.gate
        self.gate.retry_after_seconds = options.gate_retry_seconds
        self.hub = ArtifactHub(options.buffer_artifacts, options.retention_seconds)
        self.store = store
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))
        # Settled entries outlive the rounds whose status counts them.
        settled_kept = max(SETTLED_KEPT_SECONDS, options.retention_seconds)
        self.sender = CallbackSender(
            store, self._session, interval_seconds=options.callback_interval_seconds, settled_kept_seconds=settled_kept
        )
        self.control = RoundControl(
            instances,
            self.gate,
            self.hub,
            health,
            gated_services,
            poc_service,
            self._round_callback,
            lambda: admission.is_open,
        )
        self.servicer = PocServicer(self.control, self.hub, instances, limits, admission)

    def deliver_validated(self, url: str, body: ValidatedBody) -> None:
        """A validation result for `{url}/validated`: in the store when this returns, sent at once."""
        self.store.append(validated_url(url), body, round_id=None, artifacts=0)
        self.sender.flush()

    def job_callback(self, url: str, identity: CallbackIdentity, k_dim: int, request_id: str) -> ArtifactCallback:
        """The artifacts of an HTTP `generate` job for `{url}/generated`, with its `request_id`, through the store
        (the job's id groups its batches into one POST, as a round's id does)."""
        return ArtifactCallback(url, identity, k_dim, request_id, self.store, self.sender.flush, request_id=request_id)

    async def shutdown(self) -> None:
        """Stops the running round and delivery (after the flush bound); the store stays open for close()."""
        await self.control.shutdown()
        await self.sender.close(self.options.callback_flush_seconds)
        await self._session.close()

    def close(self) -> None:
        """Last: once no RPC runs any more (a validation that ends during the shutdown's grace writes its
        result to the store, for the next start to deliver)."""
        self.store.close()

    def _round_callback(self, round_id: str, params: RoundParameters) -> ArtifactCallback | None:
        if not params.callback_url:
            return None
        return ArtifactCallback(
            params.callback_url,
            CallbackIdentity.of_round(params),
            params.artifacts.k_dim,
            round_id,
            self.store,
            self.sender.flush,
        )


def poc_limits(facts: ModelFacts, instances: int, enabled: bool = True) -> PocLimits:
    """`enabled`: False when the server runs with PoC off (every PoC call is refused)."""
    return PocLimits(
        facts.served_model_name,
        facts.max_model_len,
        facts.hidden_size,
        facts.max_num_batched_tokens,
        facts.max_num_seqs,
        facts.poc_batch_cap,
        instances,
        enabled,
    )
