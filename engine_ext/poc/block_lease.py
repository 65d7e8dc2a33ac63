"""The engine-core call behind every PoC batch: borrow free KV blocks from the scheduler's block pool,
run the batch's forward on every worker, give the blocks back (../shared/vllm-seams.md 5.5).

Block ids are the pool's, and one id in two KV-cache groups is the same memory: each sequence borrows blocks of its
own for every group, in group order (engine_ext.poc.forward_metadata).

All three happen inside one utility call, between two engine steps: the scheduler never sees the
blocks missing, a live request is never preempted for them, and a caller that stops waiting cannot
leak them (the call finishes, and gives them back, whatever the caller does). When too few blocks
are free the call borrows nothing and says so; the caller decides whether to wait or shrink.

A mining round keeps its next batch queued behind the running one (no gap between forwards). A
queued utility call cannot be taken back through the engine core's input queue (it is read in
order, after the forward), so each batch names a file whose existence withdraws it: the round
creates the file when it stops, and a batch that has not started yet returns at once.
"""

from __future__ import annotations

import os
import time
from typing import Any

from engine_ext.poc.batch import BATCH_INSUFFICIENT_BLOCKS, BATCH_WITHDRAWN, PocBatch, PocBatchResult
from engine_ext.poc.forward_metadata import blocks_per_sequence, group_block_sizes
from engine_ext.seams import return_blocks_first_in_line

WORKER_METHOD = "mlnode_poc_forward"


def poc_forward_on_borrowed_blocks(engine_core: Any, wire_batch: dict[str, Any], compiled: bool) -> dict[str, Any]:
    started = time.perf_counter()
    batch = PocBatch.from_wire(wire_batch)
    if batch.withdrawn_if_exists and os.path.exists(batch.withdrawn_if_exists):
        return PocBatchResult(BATCH_WITHDRAWN).to_wire()
    scheduler = engine_core.scheduler
    pool = scheduler.kv_cache_manager.block_pool
    per_sequence = blocks_per_sequence(batch.seq_len, group_block_sizes(scheduler.kv_cache_config))
    needed = per_sequence * len(batch.nonces)
    free = pool.get_num_free_blocks()
    if needed > free:
        return PocBatchResult(BATCH_INSUFFICIENT_BLOCKS, free_blocks=free, needed_blocks=needed).to_wire()
    blocks = pool.get_new_blocks(needed)
    try:
        ids = [block.block_id for block in blocks]
        per_nonce = [ids[i * per_sequence : (i + 1) * per_sequence] for i in range(len(batch.nonces))]
        replies = engine_core.collective_rpc(WORKER_METHOD, args=(wire_batch, per_nonce, compiled))
    finally:
        return_blocks_first_in_line(pool, blocks)
    # Only the last pipeline rank computes the head; with tensor parallelism every rank has it.
    computed = [reply for reply in replies if reply is not None]
    if not computed:
        raise RuntimeError("no worker computed the PoC head (every rank answered None)")
    result = PocBatchResult.from_wire(computed[0])
    result.free_blocks, result.needed_blocks = free, needed
    result.engine_core_seconds = time.perf_counter() - started
    return result.to_wire()
