"""The PoC forward's KV layout on borrowed blocks (engine_ext.poc.forward_metadata): every KV-cache group of a
sequence writes into blocks of its own, because one block id in two groups is the same memory in vLLM's packed
layout (a shared stripe let DeepSeek-V4's caches overwrite each other within a forward)."""

from __future__ import annotations

import numpy as np
import pytest

from engine_ext.poc.forward_metadata import blocks_per_group, blocks_per_sequence, group_layout, group_stripes

# DeepSeek-V4-like groups: sparse MLA and its indexer at the cache's block size, the window compressor at 8.
BLOCK_SIZES = [256, 8, 256, 64]
SEQ_LEN = 100
BATCH = 3


def borrowed(batch: int, per_sequence: int) -> np.ndarray:
    """Pool block ids as the lease hands them out: any order, never the null block 0."""
    ids = np.random.default_rng(7).permutation(np.arange(1, 1 + batch * per_sequence))
    return ids.reshape(batch, per_sequence)


def test_each_group_gets_its_own_blocks_and_every_borrowed_block_is_used_once() -> None:
    assert blocks_per_group(SEQ_LEN, BLOCK_SIZES) == [1, 13, 1, 2]
    per_sequence = blocks_per_sequence(SEQ_LEN, BLOCK_SIZES)
    stripes = borrowed(BATCH, per_sequence)
    per_group = group_stripes(stripes, SEQ_LEN, BLOCK_SIZES)
    owners: dict[int, int] = {}
    for group_id, blocks in enumerate(per_group):
        for block in blocks.reshape(-1).tolist():
            assert block not in owners, f"block {block} serves groups {owners[block]} and {group_id}"
            owners[block] = group_id
    assert sorted(owners) == sorted(stripes.reshape(-1).tolist())


def test_a_groups_slots_lie_in_its_own_blocks_in_token_order() -> None:
    stripes = borrowed(BATCH, blocks_per_sequence(SEQ_LEN, BLOCK_SIZES))
    for blocks, size in zip(group_stripes(stripes, SEQ_LEN, BLOCK_SIZES), BLOCK_SIZES, strict=True):
        layout = group_layout(blocks, SEQ_LEN, size, kernel_blocks_per_block=1)
        slots = layout.slots.reshape(BATCH, SEQ_LEN)
        tokens = np.arange(SEQ_LEN)
        np.testing.assert_array_equal(slots, blocks[:, tokens // size] * size + tokens % size)
        assert len(set(layout.slots.tolist())) == BATCH * SEQ_LEN


def test_kernel_blocks_smaller_than_the_managers_address_the_same_slots() -> None:
    blocks = borrowed(BATCH, 1)
    layout = group_layout(blocks, SEQ_LEN, manager_block_size=256, kernel_blocks_per_block=4)
    # Manager block b holds kernel blocks 4b .. 4b+3 of 64 tokens: token t of the sequence sits at slot 256 b + t.
    np.testing.assert_array_equal(layout.slots.reshape(BATCH, SEQ_LEN), blocks * 256 + np.arange(SEQ_LEN))
    np.testing.assert_array_equal(layout.kernel_block_table, blocks * 4 + np.arange(4))


def test_a_lease_of_the_wrong_width_is_refused() -> None:
    stripes = borrowed(BATCH, blocks_per_sequence(SEQ_LEN, BLOCK_SIZES) - 1)
    with pytest.raises(ValueError, match="KV-cache groups need 17"):
        group_stripes(stripes, SEQ_LEN, BLOCK_SIZES)
