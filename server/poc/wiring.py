"""Everything PoC in the server process, built once and passed explicitly: the gate, the artifact hub,
the batch runner, the round control, callback deliveries and the servicer; its flags; its shutdown."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import aiohttp

from engine_ext.engine import MlnodeEngine
from engine_ext.model_facts import ModelFacts
from server.admission import Admission
from server.poc.artifact_hub import ArtifactHub
from server.poc.batch_runner import PocBatchRunner
from server.poc.callbacks import ArtifactCallback, CallbackIdentity
from server.poc.deliveries import CallbackDeliveries
from server.poc.options import PocOptions
from server.poc.retry import RetrySchedule
from server.poc.round_control import HealthSetter, RoundControl
from server.poc.round_params import PocLimits, RoundParameters
from server.poc.spool import Spool
from server.poc_servicer import PocServicer

log = logging.getLogger(__name__)

class PocComponents:
    def __init__(
        self,
        engine: MlnodeEngine,
        limits: PocLimits,
        admission: Admission,
        health: HealthSetter,
        gated_services: tuple[str, ...],
        poc_service: str,
        options: PocOptions,
    ) -> None:
        self.options = options
        self.limits = limits
        self.gate = admission.gate
        self.gate.retry_after_seconds = options.gate_retry_seconds
        self.hub = ArtifactHub(options.buffer_artifacts, options.retention_seconds)
        self.runner = PocBatchRunner(engine, options.block_wait_seconds)
        Path(options.spool_path).parent.mkdir(parents=True, exist_ok=True)
        self.spool = Spool(Path(options.spool_path))
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))
        self.deliveries = CallbackDeliveries(self._session, self.spool, RetrySchedule(), options.callback_interval_seconds)
        self.control = RoundControl(
            engine, self.gate, self.hub, self.runner, health, gated_services, poc_service, self._round_callback, lambda: admission.is_open
        )
        self.servicer = PocServicer(self.control, self.hub, self.runner, limits, admission)
        self._spool_delivery: asyncio.Task[None] | None = None

    def deliver_validated(self, url: str, body: dict) -> None:
        self.deliveries.post_validated(url, body)

    def start_spool_delivery(self) -> None:
        """What the previous run spooled goes out in the background."""
        self._spool_delivery = asyncio.create_task(self._deliver_spool(), name="poc-spool-delivery")

    async def shutdown(self) -> None:
        await self.control.shutdown()
        if self._spool_delivery is not None:
            self._spool_delivery.cancel()
        await self.deliveries.close(self.options.callback_flush_seconds)
        await self._session.close()

    def _round_callback(self, round_id: str, params: RoundParameters) -> ArtifactCallback | None:
        if not params.callback_url:
            return None
        identity = CallbackIdentity(params.artifacts.public_key, params.artifacts.block_hash, params.block_height, params.node_id)
        return self.deliveries.artifact_callback(params.callback_url, identity, params.artifacts.k_dim)

    async def _deliver_spool(self) -> None:
        if not self.spool.read().entries:
            return
        report = await self.spool.deliver_all(self._session, RetrySchedule())
        log.info("spooled callbacks: %s", report)


def poc_limits(facts: ModelFacts, enabled: bool = True) -> PocLimits:
    """`enabled`: False when the server runs with PoC off (every PoC call is refused)."""
    return PocLimits(facts.served_model_name, facts.max_model_len, facts.hidden_size, facts.max_num_batched_tokens, facts.max_num_seqs, enabled)
