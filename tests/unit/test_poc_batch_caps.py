"""The PoC batch bound an engine configuration imposes: async scheduling at tensor parallel > 1 on CUDA."""

from __future__ import annotations

import pytest

from engine_ext.poc.batch_caps import ASYNC_TENSOR_PARALLEL_BATCH_CAP, poc_batch_cap
from gonka.mlnode.v1 import poc_pb2
from server.core.errors import ServiceError
from server.poc.batches.round_params import PocLimits, batch_size_of

SEQ_LEN = 1024


def limits(cap_config: dict) -> PocLimits:
    return PocLimits(
        "model",
        4096,
        4096,
        max_num_batched_tokens=256 * SEQ_LEN,
        max_num_seqs=256,
        batch_cap=poc_batch_cap(**cap_config),
    )


ASYNC_TP2_CUDA = dict(async_scheduling=True, tensor_parallel_size=2, cuda=True)


@pytest.mark.parametrize(
    "config",
    [
        dict(async_scheduling=False, tensor_parallel_size=2, cuda=True),
        dict(async_scheduling=True, tensor_parallel_size=1, cuda=True),
        dict(async_scheduling=True, tensor_parallel_size=2, cuda=False),
    ],
)
def test_only_async_scheduling_at_tensor_parallel_on_cuda_is_bounded(config: dict) -> None:
    assert poc_batch_cap(**config) is None
    assert batch_size_of(poc_pb2.StartRoundRequest(batch_size=128), SEQ_LEN, limits(config)) == 128


def test_a_batch_above_the_bound_is_refused_naming_the_flag_that_lifts_it() -> None:
    bounded = limits(ASYNC_TP2_CUDA)
    assert ASYNC_TENSOR_PARALLEL_BATCH_CAP == 64
    assert batch_size_of(poc_pb2.StartRoundRequest(batch_size=64), SEQ_LEN, bounded) == 64
    with pytest.raises(ServiceError) as caught:
        batch_size_of(poc_pb2.StartRoundRequest(batch_size=65), SEQ_LEN, bounded)
    assert caught.value.field == "batch_size"
    assert "at most 64" in caught.value.message and "--no-async-scheduling" in caught.value.message


def test_the_default_batch_fits_under_the_bound() -> None:
    assert batch_size_of(poc_pb2.StartRoundRequest(), SEQ_LEN, limits(ASYNC_TP2_CUDA)) == 32
