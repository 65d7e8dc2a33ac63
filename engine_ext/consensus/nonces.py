"""Nonce assignment for a mining round (poc-v2.md section 8).

nonce(x) = node_id + group_id * node_count + x * (group_count * node_count), x = 0, 1, 2, ... taken
batch_size at a time; one group per engine replica on the machine. Every (node, group) pair owns one
residue class modulo group_count * node_count, so the sets are disjoint, and together they are dense:
validators fail a participant whose largest nonce divided by its nonce count reaches 100.
"""

from __future__ import annotations

from collections.abc import Iterator

from ._validate import require_int, require_int_at_least

INT32_MAX = 2**31 - 1  # nonces are int32 on the chain side


def nonce_at(x: int, node_id: int, node_count: int, group_id: int, group_count: int) -> int:
    """The x-th nonce (x >= 0) of (node_id, group_id)."""
    _check_assignment(node_id, node_count, group_id, group_count)
    require_int_at_least("x", x, 0)
    return node_id + group_id * node_count + x * (group_count * node_count)


def nonce_batches(
    node_id: int, node_count: int, group_id: int, group_count: int, batch_size: int
) -> Iterator[list[int]]:
    """Batches of batch_size consecutive nonces of (node_id, group_id), in order.

    Ends after the last nonce that fits in int32 (the final batch may be shorter).
    """
    _check_assignment(node_id, node_count, group_id, group_count)
    require_int_at_least("batch_size", batch_size, 1)
    return _batches(node_id + group_id * node_count, group_count * node_count, batch_size)


def _batches(first: int, stride: int, batch_size: int) -> Iterator[list[int]]:
    start = first
    while start <= INT32_MAX:
        stop = min(start + batch_size * stride, INT32_MAX + 1)
        yield list(range(start, stop, stride))
        start += batch_size * stride


def _check_assignment(node_id: int, node_count: int, group_id: int, group_count: int) -> None:
    require_int_at_least("node_count", node_count, 1)
    require_int_at_least("group_count", group_count, 1)
    require_int("node_id", node_id)
    require_int("group_id", group_id)
    if not 0 <= node_id < node_count:
        raise ValueError(f"node_id must be in [0, node_count={node_count}), got {node_id}")
    if not 0 <= group_id < group_count:
        raise ValueError(f"group_id must be in [0, group_count={group_count}), got {group_id}")
