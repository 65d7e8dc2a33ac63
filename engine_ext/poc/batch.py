"""One PoC batch and its result as they cross process boundaries: typed structs (msgspec, as vLLM's own IPC uses),
put on vLLM's utility and worker RPCs, whose msgpack carries plain dicts, lists, bytes and numbers, by to_wire and
read back, checked against their fields, by from_wire."""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

_Wired = TypeVar("_Wired", bound=msgspec.Struct)


class PocBatch(msgspec.Struct, frozen=True):
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
        return to_wire(self)

    @classmethod
    def from_wire(cls, wire: dict[str, Any]) -> PocBatch:
        return from_wire(wire, cls)

    def inputs_key(self) -> tuple[Any, ...]:
        """What a batch's inputs and head plan depend on (its prefetch identity)."""
        return (self.block_hash, self.public_key, self.nonces, self.seq_len, self.k_dim, self.stronger_rng)


# Why a batch produced no vectors (a batch that ran is ok: its nonces' outcomes say which have artifacts).
BATCH_OK = "ok"
BATCH_INSUFFICIENT_BLOCKS = "insufficient_blocks"
# The round stopped while the batch waited in the engine core's queue: it never ran.
BATCH_WITHDRAWN = "withdrawn"


class PocBatchResult(msgspec.Struct):
    status: str
    # len(nonces) * k_dim float16, little-endian, row-major (empty unless status is ok); a row whose outcome is not
    # COMPUTED is zeros and no artifact.
    vectors: bytes = b""
    # Per nonce, its engine_ext.consensus.HeadOutcome (empty unless status is ok).
    outcomes: list[int] = msgspec.field(default_factory=list)
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
    detail: str = ""

    def to_wire(self) -> dict[str, Any]:
        return to_wire(self)

    @classmethod
    def from_wire(cls, wire: dict[str, Any]) -> PocBatchResult:
        return from_wire(wire, cls)


def to_wire(struct: msgspec.Struct) -> dict[str, Any]:
    """`struct` as the RPC's msgpack carries it: its fields in order, bytes kept as bytes (tuples go as arrays)."""
    wire: dict[str, Any] = msgspec.to_builtins(struct, builtin_types=(bytes,))
    return wire


def from_wire(wire: dict[str, Any], kind: type[_Wired]) -> _Wired:
    """The struct `wire` carries; msgspec.ValidationError names a field of the wrong type."""
    return msgspec.convert(wire, kind)
