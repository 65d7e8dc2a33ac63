"""Attention metadata for one PoC forward, built fresh per call by the model's own attention builders
(../shared/vllm-seams.md 5.3): B causal sequences of S tokens, no prefix, each writing its keys and
values only into the KV blocks borrowed for it.

Reads model-runner internals that every supported vLLM has (attn_groups, kv_cache_config,
input_batch.block_table); CommonAttentionMetadata is built from the fields this vLLM declares, so one
function serves both versions.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch


class UnsupportedKvLayout(RuntimeError):
    pass


@dataclass(frozen=True)
class ForwardMetadata:
    # Per attention-layer name: the backend's metadata object.
    attention: dict[str, Any]
    # Per attention-layer name: the slot of every token (backends that write the KV outside their
    # forward read it from the forward context; without it nothing is written, silently).
    slot_mapping: dict[str, torch.Tensor]
    positions: torch.Tensor


def kv_block_size(runner: Any) -> int:
    """Tokens per KV block of the block manager (the unit borrowed from the block pool)."""
    return int(_single_group(runner).kv_cache_spec.block_size)


def build_forward_metadata(runner: Any, batch_size: int, seq_len: int, block_ids: list[list[int]]) -> ForwardMetadata:
    group = _single_group(runner)
    device = runner.device
    manager_block_size = int(group.kv_cache_spec.block_size)
    kernel_table = runner.input_batch.block_table.block_tables[0]
    per_block = int(kernel_table.blocks_per_kv_block)
    kernel_block_size = manager_block_size // per_block
    kernel_blocks = _kernel_block_ids(np.asarray(block_ids, dtype=np.int64), per_block)

    tokens = np.arange(seq_len, dtype=np.int64)
    slots = kernel_blocks[:, tokens // kernel_block_size] * kernel_block_size + tokens % kernel_block_size
    slot_mapping = torch.from_numpy(slots.reshape(-1)).to(device)
    block_table = torch.from_numpy(kernel_blocks.astype(np.int32)).to(device)

    starts_cpu = torch.arange(0, (batch_size + 1) * seq_len, seq_len, dtype=torch.int32)
    seq_lens_cpu = torch.full((batch_size,), seq_len, dtype=torch.int32)
    positions = torch.arange(seq_len, dtype=torch.int64, device=device).repeat(batch_size)
    values = {
        "query_start_loc": starts_cpu.to(device),
        "query_start_loc_cpu": starts_cpu,
        "seq_lens": seq_lens_cpu.to(device),
        "num_reqs": batch_size,
        "num_actual_tokens": batch_size * seq_len,
        "max_query_len": seq_len,
        "max_seq_len": seq_len,
        "block_table_tensor": block_table,
        "slot_mapping": slot_mapping,
        "causal": True,
        "_seq_lens_cpu": seq_lens_cpu,
        "_num_computed_tokens_cpu": torch.zeros(batch_size, dtype=torch.int32),
        # vLLM (0.20 and later) reads these (some backends assert the upper bound is set).
        "seq_lens_cpu_upper_bound": seq_lens_cpu,
        "is_prefilling": torch.ones(batch_size, dtype=torch.bool, device=device),
        "positions": positions,
    }
    from vllm.v1.attention.backend import CommonAttentionMetadata

    declared = {f.name for f in dataclasses.fields(CommonAttentionMetadata)}
    common = CommonAttentionMetadata(**{name: value for name, value in values.items() if name in declared})

    attention: dict[str, Any] = {}
    for attention_group in runner.attn_groups[0]:
        built = attention_group.get_metadata_builder(ubatch_id=0).build(
            common_prefix_len=0, common_attn_metadata=common
        )
        for layer_name in attention_group.layer_names:
            attention[layer_name] = built
    return ForwardMetadata(
        attention=attention,
        slot_mapping=dict.fromkeys(group.layer_names, slot_mapping),
        positions=positions,
    )


def _single_group(runner: Any) -> Any:
    groups = runner.kv_cache_config.kv_cache_groups
    if len(groups) != 1:
        # Hybrid models (sliding-window or mamba groups) hold several block tables per request; the
        # served Qwen3 models have one. Refuse rather than write a group's KV into another's blocks.
        raise UnsupportedKvLayout(
            f"the PoC forward supports models with one KV-cache group, this one has {len(groups)}"
        )
    return groups[0]


def _kernel_block_ids(manager_block_ids: np.ndarray, per_block: int) -> np.ndarray:
    """[B, n] block-manager ids -> [B, n * per_block] kernel block ids (vLLM's own mapping when the
    attention kernel's block is smaller than the manager's)."""
    if per_block == 1:
        return manager_block_ids
    offsets = np.arange(per_block, dtype=np.int64)
    return (manager_block_ids[:, :, None] * per_block + offsets).reshape(manager_block_ids.shape[0], -1)
