"""The server's PoC flags (imports no engine: the CLI parses flags before vLLM loads)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from server.core.dataclass_flags import add_flags, at_least, flag, flags_of
from server.poc.batches import DEFAULT_BLOCK_WAIT_SECONDS

# A production round (Qwen3-235B at TP 4) makes a few thousand nonces/s: a minute of it, and every
# round of the embedded model on this CPU, fits.
DEFAULT_BUFFER_ARTIFACTS = 1_000_000
DEFAULT_RETENTION_SECONDS = 600.0
DEFAULT_CALLBACK_FLUSH_SECONDS = 10.0
DEFAULT_CALLBACK_INTERVAL_SECONDS = 5.0
# The retry delay given to inference refused during a round: confirmation rounds are short, and
# clients should come back soon after one ends without polling hard.
DEFAULT_GATE_RETRY_SECONDS = 5.0
# How the worker runs a PoC batch (engine_ext.poc.worker_forward), or "off": no PoC at all (a model the PoC forward
# has no decoder for is served for inference only).
POC_FORWARDS = ("compiled", "eager", "off")


def default_callback_store(port: int, environment: Mapping[str, str] = os.environ) -> Path:
    """One store per server: keyed by its port (two servers on one host never share a port), in the state
    folder (XDG_STATE_HOME) of `environment`."""
    state_home = environment.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state_home) / "gonka-mlnode" / f"callbacks-port-{port}.sqlite3"


@dataclass(frozen=True)
class PocOptions:
    buffer_artifacts: int = flag(
        "--poc-buffer-artifacts",
        parse=at_least(int, 1),
        default=DEFAULT_BUFFER_ARTIFACTS,
        help="artifacts a round keeps for subscribers that reconnect (default %(default)s)",
    )
    retention_seconds: float = flag(
        "--poc-retention-s",
        parse=at_least(float, 0),
        default=DEFAULT_RETENTION_SECONDS,
        help="seconds a stopped round's artifacts stay readable by subscribers (default %(default)s)",
    )
    # None: default_callback_store of the server's port (ServerOptions.callback_store resolves it).
    callback_store: str | None = flag(
        "--callback-store",
        metavar="PATH",
        help="the durable callback store (SQLite): every callback body from its production until its "
        "delivery, kept across restarts and kills; one server per store (default: "
        "$XDG_STATE_HOME/gonka-mlnode/callbacks-port-<port>.sqlite3)",
    )
    callback_flush_seconds: float = flag(
        "--poc-callback-flush-s",
        parse=at_least(float, 0),
        default=DEFAULT_CALLBACK_FLUSH_SECONDS,
        help="at exit, seconds callbacks get to deliver; the rest stays in the store for the next "
        "start (default %(default)s)",
    )
    callback_interval_seconds: float = flag(
        "--poc-callback-interval-s",
        parse=at_least(float, 0, strictly=True),
        default=DEFAULT_CALLBACK_INTERVAL_SECONDS,
        help="seconds between artifact callback POSTs (default %(default)s, as the deployed server)",
    )
    block_wait_seconds: float = flag(
        "--poc-block-wait-s",
        parse=at_least(float, 0),
        default=DEFAULT_BLOCK_WAIT_SECONDS,
        help="a recompute batch waits this long for free KV blocks before it is split (default %(default)s)",
    )
    # One of POC_FORWARDS (compiled_forward and enabled read it).
    forward: str = flag(
        "--poc-forward",
        choices=POC_FORWARDS,
        default=POC_FORWARDS[0],
        help="compiled: the PoC forward compiled by torch.compile before the server serves (seconds "
        "to minutes at start, cached for later starts; faster batches); eager: vLLM's kernels one "
        "by one, nothing to compile; off: no PoC, inference only (for a model the PoC forward has no "
        "decoder for, which is otherwise refused at start) (default %(default)s)",
    )
    gate_retry_seconds: float = flag(
        "--poc-retry-after-s",
        parse=at_least(float, 0),
        default=DEFAULT_GATE_RETRY_SECONDS,
        help="the retry delay inference refused during a round is given (default %(default)s)",
    )

    @property
    def compiled_forward(self) -> bool:
        return self.forward == "compiled"

    @property
    def enabled(self) -> bool:
        """False (--poc-forward off): PocService and ValidatePocArtifacts refuse every call (POC_DISABLED)."""
        return self.forward != "off"


def add_poc_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("poc", "Proof of Compute (PocService, ValidatePocArtifacts)")
    add_flags(group, flags_of(PocOptions).values())
