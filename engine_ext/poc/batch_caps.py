"""PoC batch sizes that an engine configuration does not run safely, whatever its token budget allows.

The deployed PoC plugin saw an illegal-instruction failure on CUDA with vLLM 0.25.1 at tensor parallel > 1 when a
PoC batch above 64 ran with async scheduling on (vLLM's default on GPU executors; vLLM turns it off on CPU). Until a
several-GPU run rules it out, such a batch is refused with the flag that lifts the bound; batches up to 64 run.
"""

from __future__ import annotations

from dataclasses import dataclass

ASYNC_TENSOR_PARALLEL_BATCH_CAP = 64


@dataclass(frozen=True)
class PocBatchCap:
    max_batch_size: int
    # What bounds it, and the server flag that lifts the bound.
    reason: str


def poc_batch_cap(async_scheduling: bool, tensor_parallel_size: int, cuda: bool) -> PocBatchCap | None:
    if cuda and async_scheduling and tensor_parallel_size > 1:
        return PocBatchCap(
            ASYNC_TENSOR_PARALLEL_BATCH_CAP,
            f"async scheduling at tensor parallel {tensor_parallel_size} on CUDA (a PoC batch above "
            f"{ASYNC_TENSOR_PARALLEL_BATCH_CAP} failed there on the deployed nodes); start the server with "
            "--no-async-scheduling to run larger batches",
        )
    return None
