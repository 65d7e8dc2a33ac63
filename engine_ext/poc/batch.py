"""One PoC batch as it crosses process boundaries (msgpack: plain dicts, lists, bytes, numbers)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class PocBatch:
    block_hash: str
    public_key: str
    nonces: tuple[int, ...]
    seq_len: int
    k_dim: int
    stronger_rng: bool
    # The nonces of the batch expected next (same round), so a worker can generate their inputs
    # while this batch's forward runs. Empty: nothing to prefetch.
    next_nonces: tuple[int, ...] = ()
    # A file whose existence withdraws the batch (engine_ext.poc.withdrawal). Empty: none.
    withdrawn_if_exists: str = ""

    def to_wire(self) -> dict[str, Any]:
        wire = asdict(self)
        wire["nonces"] = list(self.nonces)
        wire["next_nonces"] = list(self.next_nonces)
        return wire

    @classmethod
    def from_wire(cls, wire: dict[str, Any]) -> PocBatch:
        return cls(**{**wire, "nonces": tuple(wire["nonces"]), "next_nonces": tuple(wire["next_nonces"])})

    def inputs_key(self) -> tuple[Any, ...]:
        """What a batch's inputs and head plan depend on (its prefetch identity)."""
        return (self.block_hash, self.public_key, self.nonces, self.seq_len, self.k_dim, self.stronger_rng)


# Why a batch produced no vectors (a batch that ran is ok: its nonces' outcomes say which have artifacts).
BATCH_OK = "ok"
BATCH_INSUFFICIENT_BLOCKS = "insufficient_blocks"
# The round stopped while the batch waited in the engine core's queue: it never ran.
BATCH_WITHDRAWN = "withdrawn"


@dataclass
class PocBatchResult:
    status: str
    # len(nonces) * k_dim float16, little-endian, row-major (empty unless status is ok); a row whose outcome is not
    # COMPUTED is zeros and no artifact.
    vectors: bytes = b""
    # Per nonce, its engine_ext.consensus.HeadOutcome (empty unless status is ok).
    outcomes: list[int] = field(default_factory=list)
    # Seconds, measured in the worker: the model forward, with the head's arithmetic launched behind it;
    # generating inputs this batch had to wait for (zero when the previous call prefetched them); what is
    # left of the head after the forward (the finiteness check, reading the vectors back).
    forward_seconds: float = 0.0
    input_wait_seconds: float = 0.0
    head_seconds: float = 0.0
    # Measured in the engine core: the whole call (borrow, every rank's work, give back).
    engine_core_seconds: float = 0.0
    free_blocks: int = 0
    needed_blocks: int = 0
    # Graphs the compiled PoC forward has compiled in the worker so far, and the seconds inductor took for them.
    compiled_graphs: int = 0
    compile_seconds: float = 0.0
    detail: str = field(default="")

    def to_wire(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_wire(cls, wire: dict[str, Any]) -> PocBatchResult:
        return cls(**wire)
