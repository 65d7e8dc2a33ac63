"""Attention metadata for one PoC forward, built fresh per call by the model's own attention builders
(../shared/vllm-seams.md 5.3; poc-v2-models.md section 3): B causal sequences of S tokens, no prefix, each writing
its keys and values only into the KV blocks borrowed for it.

A model may keep several KV-cache groups, each with its own block size (DeepSeek-V4: sparse MLA and its indexer at
the cache's block size, the sliding-window compressor at 8), its own block table and its own attention builders.
Block ids are the one pool's, and a layer of one group shares its cache tensor with a layer of another group
(vLLM's packed layout, v1/core/kv_cache_utils.py `_get_kv_cache_config_packed`: "they have independent block tables
so block-id namespaces never collide"): the same block id in two groups is the same memory. So each sequence
borrows, for every group, blocks of its own, ceil(S / m) of them with m the group's block-manager block size, in
group order (engine_ext.poc.block_lease), and lays out its tokens over them: slot(t) = blocks[t // m] * m + t % m,
with its kernel block table (the manager's blocks split into the kernel's where the attention kernel's block is
smaller). One stripe shared by every group let DeepSeek-V4's caches overwrite each other within a forward: on the
H200 its artifacts lay a median L2 0.27 from an independent reference, 0.027 with the groups apart (docs/gpu.md).
A model with one group (Qwen3, MiniMax-M2) gets one layout.

Reads model-runner internals that vLLM 0.25.1 and 0.28.0 both have (attn_groups, kv_cache_config,
input_batch.block_table); CommonAttentionMetadata is built from the fields this vLLM declares.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch


@dataclass(frozen=True)
class ForwardMetadata:
    # Per attention-layer name: the backend's metadata object.
    attention: dict[str, Any]
    # Per attention-layer name: the slot of every token (backends that write the KV outside their
    # forward read it from the forward context; without it nothing is written, silently).
    slot_mapping: dict[str, torch.Tensor]
    positions: torch.Tensor


@dataclass(frozen=True)
class GroupLayout:
    """One KV-cache group's placement of B sequences of S tokens on their borrowed blocks."""

    # [B * S] int64: the slot of every token, nonce-major.
    slots: np.ndarray
    # [B, blocks * kernel blocks per manager block] int32: each sequence's kernel block table.
    kernel_block_table: np.ndarray


def group_block_sizes(kv_cache_config: Any) -> list[int]:
    """The block-manager block size of each of a KV-cache config's groups, in group order."""
    return [int(group.kv_cache_spec.block_size) for group in kv_cache_config.kv_cache_groups]


def blocks_per_group(seq_len: int, block_sizes: Sequence[int]) -> list[int]:
    """Blocks one sequence borrows for each KV-cache group, in group order: ceil(S / the group's block size)."""
    return [math.ceil(seq_len / int(size)) for size in block_sizes]


def blocks_per_sequence(seq_len: int, block_sizes: Sequence[int]) -> int:
    """Blocks one sequence borrows: every group's own, none shared between groups."""
    return sum(blocks_per_group(seq_len, block_sizes))


def group_stripes(stripes: np.ndarray, seq_len: int, block_sizes: Sequence[int]) -> list[np.ndarray]:
    """stripes: [B, blocks_per_sequence] a sequence's borrowed block ids -> per group, [B, ceil(S / size)] its part."""
    counts = blocks_per_group(seq_len, block_sizes)
    if stripes.shape[1] != sum(counts):
        raise ValueError(f"{stripes.shape[1]} blocks per sequence, the KV-cache groups need {sum(counts)} ({counts})")
    bounds = np.cumsum([0, *counts])
    return [stripes[:, start:end] for start, end in itertools.pairwise(bounds)]


def group_layout(
    stripes: np.ndarray, seq_len: int, manager_block_size: int, kernel_blocks_per_block: int
) -> GroupLayout:
    """stripes: [B, ceil(S / manager_block_size)] the group's borrowed block ids per sequence."""
    kernel_blocks = _kernel_block_ids(stripes.astype(np.int64), kernel_blocks_per_block)
    kernel_block_size = manager_block_size // kernel_blocks_per_block
    tokens = np.arange(seq_len, dtype=np.int64)
    slots = kernel_blocks[:, tokens // kernel_block_size] * kernel_block_size + tokens % kernel_block_size
    return GroupLayout(slots.reshape(-1), kernel_blocks.astype(np.int32))


def build_forward_metadata(runner: Any, batch_size: int, seq_len: int, block_ids: list[list[int]]) -> ForwardMetadata:
    device = runner.device
    stripes = np.asarray(block_ids, dtype=np.int64)
    starts_cpu = torch.arange(0, (batch_size + 1) * seq_len, seq_len, dtype=torch.int32)
    seq_lens_cpu = torch.full((batch_size,), seq_len, dtype=torch.int32)
    positions = torch.arange(seq_len, dtype=torch.int64, device=device).repeat(batch_size)
    shared = {
        "query_start_loc": starts_cpu.to(device),
        "query_start_loc_cpu": starts_cpu,
        "seq_lens": seq_lens_cpu.to(device),
        "num_reqs": batch_size,
        "num_actual_tokens": batch_size * seq_len,
        "max_query_len": seq_len,
        "max_seq_len": seq_len,
        "causal": True,
        "_seq_lens_cpu": seq_lens_cpu,
        "_num_computed_tokens_cpu": torch.zeros(batch_size, dtype=torch.int32),
        # MLA-style backends read the upper bound (some assert it is set).
        "seq_lens_cpu_upper_bound": seq_lens_cpu,
        "is_prefilling": torch.ones(batch_size, dtype=torch.bool, device=device),
        # DeepSeek-V4's C128A sparse-MLA builder and its sliding-window compressor read the positions.
        "positions": positions,
    }
    from vllm.v1.attention.backend import CommonAttentionMetadata

    declared = {f.name for f in dataclasses.fields(CommonAttentionMetadata)}
    attention: dict[str, Any] = {}
    slot_mapping: dict[str, torch.Tensor] = {}
    groups = runner.kv_cache_config.kv_cache_groups
    block_sizes = group_block_sizes(runner.kv_cache_config)
    per_group = group_stripes(stripes, seq_len, block_sizes)
    for group_id, group in enumerate(groups):
        kernel_table = runner.input_batch.block_table.block_tables[group_id]
        layout = group_layout(
            per_group[group_id], seq_len, block_sizes[group_id], int(kernel_table.blocks_per_kv_block)
        )
        slots = torch.from_numpy(layout.slots).to(device)
        values = {
            **shared,
            "block_table_tensor": torch.from_numpy(layout.kernel_block_table).to(device),
            "slot_mapping": slots,
        }
        common = CommonAttentionMetadata(**{name: value for name, value in values.items() if name in declared})
        for attention_group in runner.attn_groups[group_id]:
            built = attention_group.get_metadata_builder(ubatch_id=0).build(
                common_prefix_len=0, common_attn_metadata=common
            )
            for layer_name in attention_group.layer_names:
                attention[layer_name] = built
        for layer_name in group.layer_names:
            slot_mapping[layer_name] = slots
    return ForwardMetadata(attention=attention, slot_mapping=slot_mapping, positions=positions)


def _kernel_block_ids(manager_block_ids: np.ndarray, per_block: int) -> np.ndarray:
    """[B, n] block-manager ids -> [B, n * per_block] kernel block ids (vLLM's own mapping when the
    attention kernel's block is smaller than the manager's)."""
    if per_block == 1:
        return manager_block_ids
    offsets = np.arange(per_block, dtype=np.int64)
    return (manager_block_ids[:, :, None] * per_block + offsets).reshape(manager_block_ids.shape[0], -1)
