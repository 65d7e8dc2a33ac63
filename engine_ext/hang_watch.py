"""Whether an engine hangs: work waits on it and its step progress stands still.

A stuck engine call (engine_ext.engine_calls) shows a hang only while a utility call or a collective RPC is in
flight; a hung engine core with only generation requests queued answers no call and sends no output. So the
server samples each engine's step progress (engine_ext.step_progress) and its unfinished requests at every
check: a check is frozen when requests wait and the progress has not moved for the grace; that many frozen
checks in a row make the engine hang, as the deployed node rules (MLNODE_HANG_GRACE_SEC 120, 3 frozen checks).
Any progress, or no work waiting, ends it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from engine_ext.step_progress import ProgressSample

DEFAULT_HANG_GRACE_SECONDS = 120.0
DEFAULT_FROZEN_CHECKS = 3


@dataclass(frozen=True)
class HangRule:
    grace_seconds: float = DEFAULT_HANG_GRACE_SECONDS
    frozen_checks: int = DEFAULT_FROZEN_CHECKS


# The deployed node's rule.
DEPLOYED_HANG_RULE = HangRule()


class HangWatch:
    def __init__(self, rule: HangRule = DEPLOYED_HANG_RULE, clock: Callable[[], float] = time.monotonic) -> None:
        self.rule = rule
        self._clock = clock
        self._progress: int | None = None
        # The last check that saw the progress move, or nothing waiting (None before the first check).
        self._last_live: float | None = None
        self._frozen_checks = 0

    def check(self, sample: ProgressSample) -> None:
        """One check, on the engine's step progress and unfinished requests read now."""
        now = self._clock()
        moved = sample.output_batches != self._progress
        self._progress = sample.output_batches
        if moved or sample.unfinished_requests == 0 or self._last_live is None:
            self._last_live = now
            self._frozen_checks = 0
        elif now - self._last_live >= self.rule.grace_seconds:
            self._frozen_checks += 1

    def problem(self) -> str | None:
        """Why the engine counts as hung, or None."""
        if self._last_live is None or self._frozen_checks < self.rule.frozen_checks:
            return None
        still = self._clock() - self._last_live
        return (
            f"the engine has made no step progress for {still:.0f} s while requests wait on it "
            f"(hung after {self.rule.grace_seconds:g} s and {self.rule.frozen_checks} frozen checks)"
        )
