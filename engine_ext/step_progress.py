"""The engine core's step progress as this process sees it: the output batches vLLM's output handler receives
from the engine core, counted, beside the requests this process still waits on.

Each engine step that produces output sends one batch of outputs to this process; vLLM's output handler passes
it (in chunks) to its OutputProcessor's process_outputs. A count of those calls grows while the engine steps and
stands still when it does not (a hung engine core, a stopped process), the same signal as the deployed node's
scheduler heartbeat, vLLM's `vllm:iteration_tokens_total` count, which vLLM observes from those same batches
but only where it keeps statistics. The hook is one wrapper on the AsyncLLM's own OutputProcessor instance.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ProgressSample:
    # StepProgress.output_batches when sampled.
    output_batches: int
    # Requests submitted to the engine and not finished (both output paths).
    unfinished_requests: int


class StepProgress:
    def __init__(self) -> None:
        # Output batches (chunks of one engine step's outputs) handled since the engine started.
        self.output_batches = 0

    def install(self, processor: Any) -> None:
        """Counts each call of `processor.process_outputs` (vLLM's OutputProcessor)."""
        processor.process_outputs = self._counting(processor.process_outputs)

    def _counting(self, process_outputs: Callable[..., Any]) -> Callable[..., Any]:
        def process_outputs_counted(*args: Any, **kwargs: Any) -> Any:
            self.output_batches += 1
            return process_outputs(*args, **kwargs)

        return process_outputs_counted
