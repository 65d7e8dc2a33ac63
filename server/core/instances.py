"""The server's engine instances (--instances): one engine each, on its own device slice, in this one
process. Every RPC reaches the engines through here:

- inference (Generate, ValidateInference's replays) through `pick()`: the least-loaded instance that
  serves, by the requests it has in flight (its running and waiting requests: this server is its only
  client), ties to the lowest index;
- PoC work through `available()`: a mining round runs one nonce group on each (server.poc.round.round_control),
  ComputeArtifacts and ValidatePocArtifacts spread their batches over them (server.poc.batches.spread);
- pause and resume (a round's start and end, the shutdown's drain) on all at once.

Each instance's engine runs its own vLLM output handling (vLLM's output-queue task and output handler)
as tasks of this process's one event loop: all instances' token outputs are handled on the server's core.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from engine_ext.generation.errors import EngineDead
from engine_ext.hang_watch import DEPLOYED_HANG_RULE, HangRule, HangWatch

INFERENCE_SERVICE_NAME = "gonka.mlnode.v1.InferenceService"
# What a client is told when the one engine of a server dies (the server goes down with it).
ENGINE_DIED = "the engine has died; the server is going down"


class InstanceState(enum.Enum):
    SERVING = "serving"
    # A call into its engine has gone unanswered past --engine-stuck-after, or its engine has made no step progress
    # while requests wait on it, past --engine-hang-grace (engine_ext.hang_watch).
    STUCK = "stuck"
    # Its engine's processes are gone (instances are not restarted).
    DEAD = "dead"


def instance_health_name(index: int) -> str:
    """The health-checking service name that reports one instance."""
    return f"{INFERENCE_SERVICE_NAME}/instance-{index}"


class EngineInstance:
    def __init__(
        self,
        index: int,
        engine: Any,
        runner: Any,
        device_slice: str = "the whole host",
        alone: bool = True,
        hang_rule: HangRule = DEPLOYED_HANG_RULE,
    ) -> None:
        """`engine`: an engine_ext MlnodeEngine; `runner`: its server.poc.batches.batch_runner.PocBatchRunner;
        `device_slice`: what it runs on, in words; `alone`: the server's only instance; `hang_rule`: when its
        engine counts as hung (--engine-hang-grace)."""
        self.index = index
        self.engine = engine
        self.runner = runner
        self.device_slice = device_slice
        self.alone = alone
        # Generate streams and replays routed here that have not ended.
        self.requests = 0
        self._hang = HangWatch(hang_rule)

    @property
    def name(self) -> str:
        return f"instance {self.index}"

    @property
    def state(self) -> InstanceState:
        if self.engine.errored:
            return InstanceState.DEAD
        if self.problem() is not None:
            return InstanceState.STUCK
        return InstanceState.SERVING

    def problem(self) -> str | None:
        """Why its engine counts as stuck (a call unanswered, or no step progress while requests wait), or None."""
        return self.engine.calls.problem() or self._hang.problem()

    def check_progress(self) -> None:
        """One hang check (server.engine_watch runs one per instance every watch interval)."""
        self._hang.check(self.engine.step_progress())

    def died_message(self) -> str:
        """What a client whose request ran here is told when this instance's engine dies."""
        if self.alone:
            return ENGINE_DIED
        return f"the engine of {self.name} has died; the server's other instances serve on (retry)"


class EngineInstances:
    def __init__(self, instances: Sequence[EngineInstance], min_instances: int = 1) -> None:
        if not instances:
            raise ValueError("a server runs at least one engine instance")
        self._instances = list(instances)
        self.min_instances = min_instances

    def __len__(self) -> int:
        return len(self._instances)

    def __iter__(self) -> Iterator[EngineInstance]:
        return iter(self._instances)

    def __getitem__(self, index: int) -> EngineInstance:
        return self._instances[index]

    @property
    def first(self) -> EngineInstance:
        """For what every instance has alike (the model, its facts, its tokenizer)."""
        return self._instances[0]

    @property
    def assigns_groups(self) -> bool:
        """With several instances the server numbers the nonce groups itself (one per instance)."""
        return len(self._instances) > 1

    def living(self) -> list[EngineInstance]:
        return [instance for instance in self._instances if instance.state is not InstanceState.DEAD]

    def available(self) -> list[EngineInstance]:
        """The instances new work goes to, in index order: those that serve; when none does, the living ones
        (a stuck engine may answer again: one engine alone is asked all the same, as before instances)."""
        living = self.living()
        serving = [instance for instance in living if instance.state is InstanceState.SERVING]
        return serving or living

    def require_available(self) -> list[EngineInstance]:
        available = self.available()
        if not available:
            raise EngineDead("every instance's engine has died")
        return available

    @contextmanager
    def pick(self) -> Iterator[EngineInstance]:
        """The least-loaded available instance, holding one request of its load while the block runs."""
        instance = min(self.require_available(), key=lambda candidate: candidate.requests)
        instance.requests += 1
        try:
            yield instance
        finally:
            instance.requests -= 1

    def below_minimum(self) -> str | None:
        """Why the server must go down (fewer living instances than --min-instances), or None."""
        living = len(self.living())
        if living >= self.min_instances:
            return None
        if len(self._instances) == 1:
            return "the engine died"
        return f"{living} of {len(self._instances)} instances have a living engine, fewer than --min-instances {self.min_instances}"

    async def pause(self) -> int:
        """Every living instance refuses new requests and aborts those in flight; returns how many."""
        aborted = 0
        for instance in self.living():
            aborted += await instance.engine.pause()
        return aborted

    def resume(self) -> None:
        for instance in self._instances:
            instance.engine.resume()

    @property
    def call_timeout_seconds(self) -> float:
        return max(instance.engine.calls.timeout_seconds for instance in self._instances)
