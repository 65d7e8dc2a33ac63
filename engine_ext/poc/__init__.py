"""The engine side of Proof of Compute: the batched PoC forward in each worker, and the engine-core
call that borrows KV blocks for it, runs it and gives the blocks back (one call, so no caller can
leak blocks). Every number comes from engine_ext.consensus."""
