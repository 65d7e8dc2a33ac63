"""Two Triton kernels for the routed experts of the compiled PoC forward.

gate_up_swiglu: the gate and up projections with SwiGLU applied in the same kernel. vLLM's Triton experts write
each routed token's gate and up projections (2 x width values) to memory, then a second kernel reads them back to
write silu(gate) * up (width values). Here one kernel computes, for a tile of one expert's routed tokens, the gate
and the up columns of the same output columns side by side (two accumulators over the same A tiles) and writes
only silu(gate) * up: the activation kernel and the round trip of the un-activated projections through memory go
away. The routed tokens come in vLLM's expert-aligned order
(moe_align_block_size: token-slot ids grouped by expert, each expert's group padded to a multiple of BLOCK_M,
padding ids >= the slot count), so the output rows are token slots (token x top_k), as vLLM's down projection
reads them.

Numerics: silu(gate) * up is taken from the fp32 accumulators; vLLM rounds gate and up to the activations'
dtype first. The difference is one rounding of the operands: on the H200, relative L2 0.005 from vLLM's experts
output, and the PoC artifacts at the same largest L2 from the eager forward's as before (0.0194, bound 0.02).

topk_sum: each token's top_k down projections (already scaled by their router weights) summed into its output
row, accumulated in fp32 and rounded once.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl


@dataclass(frozen=True)
class GateUpTile:
    """Launch parameters: BLOCK_N is the count of output (activated) columns a program writes, each from one
    gate and one up column."""

    block_n: int = 128
    block_k: int = 64
    group_m: int = 16
    num_warps: int = 8
    num_stages: int = 4


@triton.jit
def _gate_up_swiglu_kernel(
    a_ptr,
    w_ptr,
    out_ptr,
    sorted_slot_ids_ptr,
    expert_ids_ptr,
    padded_slots_ptr,
    width,
    hidden,
    slots,
    launched_slots,
    stride_am,
    stride_we,
    stride_wn,
    stride_om,
    top_k: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    EVEN_K: tl.constexpr,
):
    pid = tl.program_id(axis=0)
    # Grouped launch order: GROUP_M row tiles share each column tile while it is in L2.
    row_tiles = tl.cdiv(launched_slots, BLOCK_M)
    col_tiles = tl.cdiv(width, BLOCK_N)
    tiles_in_group = GROUP_M * col_tiles
    first_row_tile = (pid // tiles_in_group) * GROUP_M
    group_rows = min(row_tiles - first_row_tile, GROUP_M)
    row_tile = first_row_tile + (pid % tiles_in_group) % group_rows
    col_tile = (pid % tiles_in_group) // group_rows
    # The launch covers the most slots the alignment can pad to; tiles past the actual count have nothing to do.
    if row_tile * BLOCK_M >= tl.load(padded_slots_ptr):
        return

    slot_ids = tl.load(sorted_slot_ids_ptr + row_tile * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    slot_mask = slot_ids < slots
    expert = tl.load(expert_ids_ptr + row_tile).to(tl.int64)

    cols = col_tile * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < width
    ks = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + (slot_ids // top_k)[:, None] * stride_am + ks[None, :]
    gate_ptrs = w_ptr + expert * stride_we + cols[None, :].to(tl.int64) * stride_wn + ks[:, None]
    up_ptrs = gate_ptrs + width * stride_wn

    gate = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    up = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(tl.cdiv(hidden, BLOCK_K)):
        if EVEN_K:
            a = tl.load(a_ptrs, mask=slot_mask[:, None], other=0.0)
            w_gate = tl.load(gate_ptrs, mask=col_mask[None, :], other=0.0)
            w_up = tl.load(up_ptrs, mask=col_mask[None, :], other=0.0)
        else:
            k_mask = ks < hidden - k * BLOCK_K
            a = tl.load(a_ptrs, mask=slot_mask[:, None] & k_mask[None, :], other=0.0)
            w_gate = tl.load(gate_ptrs, mask=k_mask[:, None] & col_mask[None, :], other=0.0)
            w_up = tl.load(up_ptrs, mask=k_mask[:, None] & col_mask[None, :], other=0.0)
        gate = tl.dot(a, w_gate, acc=gate)
        up = tl.dot(a, w_up, acc=up)
        a_ptrs += BLOCK_K
        gate_ptrs += BLOCK_K
        up_ptrs += BLOCK_K

    activated = gate / (1.0 + tl.exp(-gate)) * up
    out_ptrs = out_ptr + slot_ids[:, None] * stride_om + cols[None, :]
    tl.store(out_ptrs, activated.to(out_ptr.dtype.element_ty), mask=slot_mask[:, None] & col_mask[None, :])


def gate_up_swiglu(
    hidden_states: torch.Tensor,
    w13: torch.Tensor,
    out: torch.Tensor,
    sorted_slot_ids: torch.Tensor,
    expert_ids: torch.Tensor,
    padded_slots: torch.Tensor,
    top_k: int,
    block_m: int,
    tile: GateUpTile,
) -> None:
    """out[slot] = silu(x W_gate^T) * (x W_up^T) for every routed token slot (token * top_k + j), x the slot's
    token row of hidden_states [tokens, hidden] and W the slot's expert's rows of w13 [experts, 2 * width,
    hidden] (gate rows first, as vLLM stores them); out is [tokens * top_k, width]. sorted_slot_ids, expert_ids
    and padded_slots are moe_align_block_size's output for block_m."""
    tokens, hidden = hidden_states.shape
    width = w13.shape[1] // 2
    if hidden_states.stride(1) != 1 or w13.stride(2) != 1 or out.stride(1) != 1:
        raise ValueError("gate_up_swiglu needs the last dimension of its operands contiguous")
    if tuple(out.shape) != (tokens * top_k, width):
        raise ValueError(f"gate_up_swiglu: out is {tuple(out.shape)}, expected {(tokens * top_k, width)}")
    launched_slots = sorted_slot_ids.shape[0]
    grid = (triton.cdiv(launched_slots, block_m) * triton.cdiv(width, tile.block_n),)
    _gate_up_swiglu_kernel[grid](
        hidden_states,
        w13,
        out,
        sorted_slot_ids,
        expert_ids,
        padded_slots,
        width,
        hidden,
        tokens * top_k,
        launched_slots,
        hidden_states.stride(0),
        w13.stride(0),
        w13.stride(1),
        out.stride(0),
        top_k=top_k,
        BLOCK_M=block_m,
        BLOCK_N=tile.block_n,
        BLOCK_K=tile.block_k,
        GROUP_M=tile.group_m,
        EVEN_K=hidden % tile.block_k == 0,
        num_warps=tile.num_warps,
        num_stages=tile.num_stages,
    )


@triton.jit
def _topk_sum_kernel(
    in_ptr,
    out_ptr,
    tokens,
    hidden,
    stride_it,
    stride_ik,
    stride_ot,
    top_k: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_H: tl.constexpr,
):
    rows = tl.program_id(axis=0) * BLOCK_T + tl.arange(0, BLOCK_T)
    cols = tl.program_id(axis=1) * BLOCK_H + tl.arange(0, BLOCK_H)
    mask = (rows < tokens)[:, None] & (cols < hidden)[None, :]
    in_ptrs = in_ptr + rows[:, None].to(tl.int64) * stride_it + cols[None, :]
    total = tl.zeros((BLOCK_T, BLOCK_H), dtype=tl.float32)
    for j in tl.static_range(top_k):
        total += tl.load(in_ptrs + j * stride_ik, mask=mask, other=0.0).to(tl.float32)
    out_ptrs = out_ptr + rows[:, None].to(tl.int64) * stride_ot + cols[None, :]
    tl.store(out_ptrs, total.to(out_ptr.dtype.element_ty), mask=mask)


@dataclass(frozen=True)
class SumTile:
    block_t: int = 4
    block_h: int = 512
    num_warps: int = 4


def topk_sum(routed: torch.Tensor, out: torch.Tensor, tile: SumTile = SumTile()) -> None:
    """out[t] = sum_j routed[t, j] for routed [tokens, top_k, hidden] and out [tokens, hidden]."""
    tokens, top_k, hidden = routed.shape
    if routed.stride(2) != 1 or out.stride(1) != 1 or tuple(out.shape) != (tokens, hidden):
        raise ValueError(f"topk_sum: routed {tuple(routed.shape)} and out {tuple(out.shape)} do not fit")
    grid = (triton.cdiv(tokens, tile.block_t), triton.cdiv(hidden, tile.block_h))
    _topk_sum_kernel[grid](
        routed,
        out,
        tokens,
        hidden,
        routed.stride(0),
        routed.stride(1),
        out.stride(0),
        top_k=top_k,
        BLOCK_T=tile.block_t,
        BLOCK_H=tile.block_h,
        num_warps=tile.num_warps,
    )
