"""A configuration as the schedule runs it: a label, the process it runs in, its warm-up and its
measured round. Streamed configurations (measurement) and the offline one (offline_rounds) differ in
how they run a round, not in how they are scheduled."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from benchmarks.serving.round_result import RoundResult


class Live(Protocol):
    """A started configuration's process (a server, or the offline engine's process)."""

    @property
    def kind(self) -> str: ...

    @property
    def log_path(self) -> Path: ...

    def process_ids(self) -> list[int]:
        """It and all its descendants now: what a bystander figure counts."""
        ...

    def info(self) -> dict[str, Any]:
        """For the JSON document: command, pids, vLLM's logged engine configuration."""
        ...


WarmUp = Callable[[int], Awaitable[None]]  # (streams)
Measure = Callable[[int, int, Sequence[int]], Awaitable[RoundResult]]  # (streams, cycle, bystander pids)


@dataclass(frozen=True)
class Configuration:
    label: str  # a server kind, ours with an option, or offline
    logprobs: bool
    live: Live
    warm_up: WarmUp
    measure: Measure
