"""The node's state as the API node reads it from `/api/v1/state` (spec section 1), kept over the objects the gRPC
services drive, never beside them:

- INFERENCE at start, and after `inference/up` names the served model;
- STOPPED after `stop` (the engine stays loaded: only the HTTP inference port refuses, with 503);
- POW whenever PoC work runs, whoever started it (a mining round through PocService or `init/generate`, a
  validation job through `generate`); when it ends, the state is the mode again (INFERENCE or STOPPED).

The deployed MLNode 3.1.0 reports INFERENCE with `poc_status` GENERATING while its backends mine; the API node
reads either as PoC (it maps POW to its POC status; docs/http-api.md says what differs).
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from server.core.errors import echoed
from server.core.instances import EngineInstances, InstanceState
from server.http.errors import HttpError
from server.poc.round.round_control import RoundControl

log = logging.getLogger(__name__)


class NodeMode(enum.Enum):
    """What `stop` and `inference/up` set."""

    INFERENCE = "INFERENCE"
    STOPPED = "STOPPED"


class PocStatus(enum.Enum):
    """The deployed names (spec section 1, `poc_status` and `pow/status`)."""

    IDLE = "IDLE"
    GENERATING = "GENERATING"
    VALIDATING = "VALIDATING"
    # Every engine instance has died.
    NO_BACKENDS = "NO_BACKENDS"


POW = "POW"


@dataclass(frozen=True)
class ServedModel:
    """The model the engine serves, by the names a request may use for it: the served name (what `/v1/models`
    lists) and the path or repository the engine loaded (what the API node sends to `inference/up`)."""

    name: str
    path: str

    def is_named_by(self, model: str) -> bool:
        return model in (self.name, self.path)


class NodeState:
    def __init__(self, control: RoundControl, instances: EngineInstances, served: ServedModel) -> None:
        self._control = control
        self._instances = instances
        self.served = served
        self._mode = NodeMode.INFERENCE
        self._validation_jobs = 0
        # stop and inference/up take effect in the order they arrive, each after the round it stops has ended.
        self._transition = asyncio.Lock()

    @property
    def mode(self) -> NodeMode:
        return self._mode

    @property
    def state(self) -> str:
        return POW if self.poc_status in (PocStatus.GENERATING, PocStatus.VALIDATING) else self._mode.value

    @property
    def poc_status(self) -> PocStatus:
        # A round that is stopping still holds the engine (and the priority gate): it counts as generating.
        if self._control.running is not None:
            return PocStatus.GENERATING
        if self._validation_jobs:
            return PocStatus.VALIDATING
        if not self._instances.living():
            return PocStatus.NO_BACKENDS
        return PocStatus.IDLE

    @property
    def inference_healthy(self) -> bool:
        """Some engine instance serves (none dead or stuck past --engine-stuck-after)."""
        return any(instance.state is InstanceState.SERVING for instance in self._instances)

    @property
    def serves_inference(self) -> bool:
        """Whether the HTTP inference port takes requests now (the priority gate is the gRPC services' own)."""
        return self._mode is NodeMode.INFERENCE

    @contextmanager
    def validation_job(self) -> Iterator[None]:
        """Held while a `generate` job computes: the node reports POW / VALIDATING meanwhile."""
        self._validation_jobs += 1
        try:
            yield
        finally:
            self._validation_jobs -= 1

    async def stop(self) -> None:
        """`/api/v1/stop`: the running round stops (its forwards in flight return first), the node is STOPPED."""
        async with self._transition:
            await self._stop_round()
            self._mode = NodeMode.STOPPED
        log.info("node STOPPED (/api/v1/stop): the HTTP inference port refuses until inference/up")

    async def inference_up(self, model: str) -> None:
        """`/api/v1/inference/up`: with the served model the node serves inference again (a running round is
        stopped, as the deployed node's restart of its engine ends it); with any other model, 409 and no change:
        this server serves the one model it was started with."""
        if not self.served.is_named_by(model):
            log.warning(
                "inference/up refused: it names model %s, this node serves %r (loaded from %r)",
                echoed(model),
                self.served.name,
                self.served.path,
            )
            raise HttpError(
                409,
                "MODEL_MISMATCH",
                f"model: this node serves {self.served.name!r} (loaded from {self.served.path!r}) and loads no "
                f"other; got {echoed(model)}",
                "model",
            )
        async with self._transition:
            await self._stop_round()
            self._mode = NodeMode.INFERENCE
        log.info("node serves inference (/api/v1/inference/up %s)", model)

    async def stop_poc(self) -> None:
        """`pow/stop`: the running round stops (its forwards in flight return first); the mode stays."""
        async with self._transition:
            await self._stop_round()

    async def _stop_round(self) -> None:
        running = self._control.running
        if running is not None:
            await self._control.stop(running.round_id)
