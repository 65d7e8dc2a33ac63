"""The server's PoC flags (imports no engine: the CLI parses flags before vLLM loads)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

# Seconds a recompute batch waits for free KV blocks before it is split (server.poc.batches.batch_runner).
DEFAULT_BLOCK_WAIT_SECONDS = 2.0

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
    buffer_artifacts: int = DEFAULT_BUFFER_ARTIFACTS
    retention_seconds: float = DEFAULT_RETENTION_SECONDS
    # None: default_callback_store of the server's port (ServerOptions.callback_store resolves it).
    callback_store: str | None = None
    callback_flush_seconds: float = DEFAULT_CALLBACK_FLUSH_SECONDS
    callback_interval_seconds: float = DEFAULT_CALLBACK_INTERVAL_SECONDS
    block_wait_seconds: float = DEFAULT_BLOCK_WAIT_SECONDS
    gate_retry_seconds: float = DEFAULT_GATE_RETRY_SECONDS
    compiled_forward: bool = True
    # False (--poc-forward off): PocService and ValidatePocArtifacts refuse every call (POC_DISABLED).
    enabled: bool = True


def add_poc_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("poc", "Proof of Compute (PocService, ValidatePocArtifacts)")
    group.add_argument(
        "--poc-buffer-artifacts",
        type=_at_least(int, 1),
        default=DEFAULT_BUFFER_ARTIFACTS,
        help="artifacts a round keeps for subscribers that reconnect (default %(default)s)",
    )
    group.add_argument(
        "--poc-retention-s",
        type=_at_least(float, 0),
        default=DEFAULT_RETENTION_SECONDS,
        help="seconds a stopped round's artifacts stay readable by subscribers (default %(default)s)",
    )
    group.add_argument(
        "--callback-store",
        default=None,
        metavar="PATH",
        help="the durable callback store (SQLite): every callback body from its production until its "
        "delivery, kept across restarts and kills; one server per store (default: "
        "$XDG_STATE_HOME/gonka-mlnode/callbacks-port-<port>.sqlite3)",
    )
    group.add_argument(
        "--poc-callback-flush-s",
        type=_at_least(float, 0),
        default=DEFAULT_CALLBACK_FLUSH_SECONDS,
        help="at exit, seconds callbacks get to deliver; the rest stays in the store for the next "
        "start (default %(default)s)",
    )
    group.add_argument(
        "--poc-callback-interval-s",
        type=_at_least(float, 0, strictly=True),
        default=DEFAULT_CALLBACK_INTERVAL_SECONDS,
        help="seconds between artifact callback POSTs (default %(default)s, as the deployed server)",
    )
    group.add_argument(
        "--poc-block-wait-s",
        type=_at_least(float, 0),
        default=DEFAULT_BLOCK_WAIT_SECONDS,
        help="a recompute batch waits this long for free KV blocks before it is split (default %(default)s)",
    )
    group.add_argument(
        "--poc-forward",
        choices=POC_FORWARDS,
        default=POC_FORWARDS[0],
        help="compiled: the PoC forward compiled by torch.compile before the server serves (seconds "
        "to minutes at start, cached for later starts; faster batches); eager: vLLM's kernels one "
        "by one, nothing to compile; off: no PoC, inference only (for a model the PoC forward has no "
        "decoder for, which is otherwise refused at start) (default %(default)s)",
    )
    group.add_argument(
        "--poc-retry-after-s",
        type=_at_least(float, 0),
        default=DEFAULT_GATE_RETRY_SECONDS,
        help="the retry delay inference refused during a round is given (default %(default)s)",
    )


def poc_options_from(namespace: argparse.Namespace) -> PocOptions:
    return PocOptions(
        buffer_artifacts=namespace.poc_buffer_artifacts,
        retention_seconds=namespace.poc_retention_s,
        callback_store=namespace.callback_store,
        callback_flush_seconds=namespace.poc_callback_flush_s,
        callback_interval_seconds=namespace.poc_callback_interval_s,
        block_wait_seconds=namespace.poc_block_wait_s,
        gate_retry_seconds=namespace.poc_retry_after_s,
        compiled_forward=namespace.poc_forward == "compiled",
        enabled=namespace.poc_forward != "off",
    )


def _at_least(kind: type, lowest: float, strictly: bool = False) -> Callable[[str], float]:
    def check(text: str) -> float:
        value = kind(text)
        if value < lowest or (strictly and value == lowest):
            raise argparse.ArgumentTypeError(f"must be {'>' if strictly else '>='} {lowest}, got {text}")
        return value

    return check
