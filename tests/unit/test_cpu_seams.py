"""The CPU seams: grammar bitmask rows for every request, and seeded sampling that keeps its generators."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from vllm.v1.core.sched.output import GrammarOutput

from engine_ext.seams.common import SEAM_MARK
from engine_ext.seams.vllm_0_15 import CPU_GRAMMAR_BITMASK, _mask_every_row_on_cpu, _with_a_row_for_every_request


def test_unconstrained_rows_get_an_allow_all_mask_in_batch_order() -> None:
    grammar = GrammarOutput(structured_output_request_ids=["c", "a"], grammar_bitmask=np.array([[1, 2], [3, 4]], dtype=np.int32))
    scheduler = SimpleNamespace(scheduled_spec_decode_tokens={})
    batch = SimpleNamespace(req_ids=["a", "b", "c"])
    widened = _with_a_row_for_every_request(scheduler, grammar, batch)
    assert widened.structured_output_request_ids == ["a", "b", "c"]
    assert widened.grammar_bitmask.tolist() == [[3, 4], [-1, -1], [1, 2]]


def test_speculative_rows_stay_with_their_request() -> None:
    grammar = GrammarOutput(structured_output_request_ids=["a"], grammar_bitmask=np.array([[1, 1], [2, 2]], dtype=np.int32))
    scheduler = SimpleNamespace(scheduled_spec_decode_tokens={"a": [99], "b": [98]})
    widened = _with_a_row_for_every_request(scheduler, grammar, SimpleNamespace(req_ids=["b", "a"]))
    assert widened.grammar_bitmask.tolist() == [[-1, -1], [-1, -1], [1, 1], [2, 2]]


def test_the_wrapped_function_sees_every_row_on_cpu_only() -> None:
    seen = []
    wrapped = _mask_every_row_on_cpu(lambda s, g, b, logits: seen.append(g.structured_output_request_ids))
    assert getattr(wrapped, SEAM_MARK) == CPU_GRAMMAR_BITMASK
    grammar = GrammarOutput(structured_output_request_ids=["b"], grammar_bitmask=np.zeros((1, 2), dtype=np.int32))
    scheduler = SimpleNamespace(scheduled_spec_decode_tokens={})
    wrapped(scheduler, grammar, SimpleNamespace(req_ids=["a", "b"]), torch.zeros(2, 4))
    wrapped(scheduler, grammar, SimpleNamespace(req_ids=["a", "b"]), torch.zeros(2, 4, device="meta"))
    assert seen == [["a", "b"], ["b"]]


def test_the_widened_mask_leaves_unconstrained_logits_untouched() -> None:
    """Through vLLM's own apply_grammar_bitmask and xgrammar's CPU kernel: mixed rows, no crash."""
    from vllm.v1.structured_output.utils import apply_grammar_bitmask

    vocab = 64
    allow_only_3 = np.zeros((1, vocab // 32), dtype=np.int32)
    allow_only_3[0, 0] = 1 << 3
    grammar = GrammarOutput(structured_output_request_ids=["s"], grammar_bitmask=allow_only_3)
    logits = torch.arange(3 * vocab, dtype=torch.float32).reshape(3, vocab)
    expected_free = logits[[0, 2]].clone()
    scheduler = SimpleNamespace(scheduled_spec_decode_tokens={})
    _mask_every_row_on_cpu(apply_grammar_bitmask)(scheduler, grammar, SimpleNamespace(req_ids=["u1", "s", "u2"]), logits)
    assert torch.equal(logits[[0, 2]], expected_free)
    assert torch.isinf(logits[1]).sum() == vocab - 1 and logits[1, 3] == 3 + vocab


def test_without_the_seam_a_mixed_batch_crashes_on_a_driverless_host_on_vllm_0_15_only() -> None:
    """The bug the seam exists for, reproduced with vLLM's unwrapped function; vLLM 0.20 fixed it,
    which the same call shows there, and so 0.20's seams leave the function alone."""
    import vllm
    from vllm.v1.structured_output.utils import apply_grammar_bitmask

    from engine_ext.seams import expected_seams
    from engine_ext.vllm_version import minor_of

    if torch.cuda.is_available():
        pytest.skip("pinned memory works where an NVIDIA driver is present; the bug is CPU-host only")
    allow_only_3 = np.zeros((1, 2), dtype=np.int32)
    allow_only_3[0, 0] = 1 << 3
    grammar = GrammarOutput(structured_output_request_ids=["s"], grammar_bitmask=allow_only_3)
    scheduler = SimpleNamespace(scheduled_spec_decode_tokens={})
    logits = torch.zeros(2, 64)
    if minor_of(vllm.__version__) == "0.15":
        assert CPU_GRAMMAR_BITMASK in expected_seams(is_cpu_platform=True)
        with pytest.raises(RuntimeError):
            apply_grammar_bitmask(scheduler, grammar, SimpleNamespace(req_ids=["u", "s"]), logits)
    else:
        assert CPU_GRAMMAR_BITMASK not in expected_seams(is_cpu_platform=True)
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


def test_without_the_seam_a_mixed_batch_ignores_the_seeds_on_both_releases() -> None:
    """The bug the mixed-batch seam exists for, with vLLM's unwrapped forward_cpu: the same seeds give other
    tokens from one call to the next. vLLM 0.20.1 has the same code, so its seams keep this one."""
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
