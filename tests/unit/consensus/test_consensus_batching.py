"""Batched results equal per-item results bit for bit, whatever the batch order, size or tiling, and
the tiled input generator equals the spec's straightforward per-nonce formulation."""

from __future__ import annotations

import math

import pytest
import torch

import engine_ext.consensus as C
from engine_ext.consensus import cuda_fused
from engine_ext.consensus.murmur import murmur3_32
from engine_ext.consensus.reductions import pairwise_norm, pairwise_sum
from tests.support.spec_reference import spec_inputs, spec_normal

BH, PK = "00000a1b2c3d", "02f3c9e8a7b6"
NONCES = [0, 1, 7, 123456789, -5, 2**31 - 1]
DTYPES = [torch.bfloat16, torch.float16, torch.float32]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("stronger", [False, True], ids=["base", "stronger"])
@pytest.mark.parametrize(("seq_len", "hidden"), [(4, 8), (3, 7), (1, 1), (5, 9), (2, 33)])
def test_inputs_equal_the_spec_formulation(dtype: torch.dtype, stronger: bool, seq_len: int, hidden: int) -> None:
    out = torch.full((len(NONCES), seq_len, hidden), float("nan"), dtype=dtype)
    C.generate_inputs(out, BH, PK, NONCES, stronger_rng=stronger, tile_elements=16)
    for row, nonce in zip(out, NONCES):
        assert torch.equal(row, spec_inputs(BH, PK, nonce, seq_len, hidden, dtype, stronger))


@pytest.mark.parametrize("stronger", [False, True], ids=["base", "stronger"])
def test_inputs_do_not_depend_on_batch_order_size_or_tiling(stronger: bool) -> None:
    seq_len, hidden = 6, 50
    single = {
        n: C.inputs_for_nonce(BH, PK, n, seq_len, hidden, dtype=torch.bfloat16, stronger_rng=stronger) for n in NONCES
    }
    orders = [NONCES, NONCES[::-1], NONCES[2:] + NONCES[:2], NONCES[:1], NONCES[3:5]]
    for order in orders:
        for tile in (16, 100, 1000, None):
            out = torch.empty((len(order), seq_len, hidden), dtype=torch.bfloat16)
            C.generate_inputs(out, BH, PK, order, stronger_rng=stronger, tile_elements=tile)
            for row, nonce in zip(out, order):
                assert torch.equal(row, single[nonce]), (order, tile, nonce)


def test_inputs_fill_rows_of_a_larger_buffer_in_place() -> None:
    # The engine may hand over a slice of its own input buffer: rows must be written where they are.
    buffer = torch.zeros((5, 4, 8), dtype=torch.bfloat16)
    C.generate_inputs(buffer[1:4], BH, PK, [3, 4, 5])
    assert torch.equal(buffer[0], torch.zeros(4, 8, dtype=torch.bfloat16))
    assert torch.equal(buffer[4], torch.zeros(4, 8, dtype=torch.bfloat16))
    for row, nonce in zip(buffer[1:4], [3, 4, 5]):
        assert torch.equal(row, spec_inputs(BH, PK, nonce, 4, 8, torch.bfloat16, False))


def test_normal_rows_equal_single_normals() -> None:
    seeds = [0, 1, 2**32 - 1, 1589641989, 77]
    for n in (1, 2, 11, 64, 1001):
        rows = C.normal_rows(seeds, n)
        for row, seed in zip(rows, seeds):
            assert torch.equal(row, C.normal(seed, n))
            assert torch.equal(row, spec_normal(seed, n))


def test_fill_normal_rows_tiling_is_invisible() -> None:
    seeds = list(range(100, 112))
    ref = C.normal_rows(seeds, 257)
    for tile in (2, 3, 64, 257, 4096):
        out = torch.empty((12, 257), dtype=torch.float32)
        C.fill_normal_rows(out, seeds, tile_elements=tile)
        assert torch.equal(out, ref), tile
    grid = torch.empty((3, 4, 257), dtype=torch.float32)
    C.fill_normal_rows(grid, seeds, tile_elements=50)
    assert torch.equal(grid.view(12, 257), ref)


def emulated_fused_tile(
    seed: tuple[torch.Tensor, torch.Tensor],
    key_a: tuple[torch.Tensor, torch.Tensor],
    pairs: tuple[torch.Tensor, torch.Tensor],
    want_sin: torch.Tensor,
) -> torch.Tensor:
    """What the CUDA kernel computes per element, in eager torch on CPU (same float32 op sequence)."""
    join = lambda hi, lo: (hi.to(torch.int64) << 16) | lo.to(torch.int64)  # noqa: E731
    seeds, ka = join(*seed), join(*key_a)
    kb = (ka + join(*pairs)) & 0xFFFFFFFF
    u1 = murmur3_32(ka, seeds).to(torch.float32).mul_(2.0**-32).clamp_min_(1e-10)
    u2 = murmur3_32(kb, seeds).to(torch.float32).mul_(2.0**-32)
    r = torch.sqrt(torch.log(u1) * -2.0)
    theta = u2 * (2.0 * math.pi)
    return torch.where(want_sin != 0.0, r * torch.sin(theta), r * torch.cos(theta))


def test_fused_tile_plumbing_with_an_emulated_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    # The CUDA kernel itself is checked on a GPU (tests/gpu/consensus_check.py); this checks, on
    # CPU, that the fused path feeds it the right seed halves, keys and pair offset for every tile.
    monkeypatch.setattr(cuda_fused, "available", lambda device: True)
    monkeypatch.setattr(cuda_fused, "normals_tile", emulated_fused_tile)
    for stronger in (False, True):
        for tile in (16, 90, None):
            fused = torch.empty((4, 5, 9), dtype=torch.bfloat16)
            C.generate_inputs(
                fused, BH, PK, NONCES[:4], stronger_rng=stronger, tile_elements=tile, backend="cuda_fused"
            )
            plain = torch.empty_like(fused)
            C.generate_inputs(plain, BH, PK, NONCES[:4], stronger_rng=stronger, backend="torch")
            assert torch.equal(fused, plain), (stronger, tile)


def test_pick_batch_equals_single() -> None:
    batch = C.pick_indices(BH, PK, NONCES, 896, 12)
    for row, nonce in zip(batch, NONCES):
        assert torch.equal(row, C.pick_indices(BH, PK, [nonce], 896, 12)[0])
        assert len(set(row.tolist())) == 12
        scores = murmur3_32(torch.arange(896), C.pick_seed(BH, PK, nonce, 12))
        smallest = sorted(range(896), key=lambda i: int(scores[i]))[:12]
        assert row.tolist() == sorted(smallest[:11]) + [smallest[11]]


def test_head_batch_equals_single_and_is_order_independent() -> None:
    hidden = torch.randn((len(NONCES), 256), generator=torch.Generator().manual_seed(1)) * 4
    batch = C.head_vectors(hidden, BH, PK, NONCES)
    for i, nonce in enumerate(NONCES):
        assert torch.equal(batch[i], C.head_vectors(hidden[i : i + 1], BH, PK, [nonce])[0])
    perm = [3, 0, 5, 1, 4, 2]
    permuted = C.head_vectors(hidden[perm], BH, PK, [NONCES[i] for i in perm])
    assert torch.equal(permuted, batch[perm])
    norms = batch.to(torch.float32).norm(dim=1)
    assert torch.allclose(norms, torch.ones_like(norms), atol=2e-3)


def test_a_head_plan_made_beforehand_gives_the_same_bits() -> None:
    # The prover makes each batch's plan while the forward before it runs (engine_ext.poc.worker_forward).
    hidden = torch.randn((len(NONCES), 256), generator=torch.Generator().manual_seed(4)) * 3
    plan = C.head_plan(BH, PK, NONCES, 256, 12)
    assert torch.equal(plan.indices, C.pick_indices(BH, PK, NONCES, 256, 12))
    assert torch.equal(plan.rotations, C.rotation_vectors(BH, PK, NONCES, 12))
    assert torch.equal(C.planned_head_vectors(hidden, plan), C.head_vectors(hidden, BH, PK, NONCES))
    vectors, outcomes = C.unchecked_head_vectors(hidden, plan)
    assert outcomes.shape == (len(NONCES),) and C.head_outcomes(outcomes) == [C.HeadOutcome.COMPUTED] * len(NONCES)
    assert torch.equal(vectors, C.head_vectors(hidden, BH, PK, NONCES))


def test_head_accepts_model_dtypes() -> None:
    hidden = torch.randn((2, 64), generator=torch.Generator().manual_seed(2))
    ref = C.head_vectors(hidden.to(torch.bfloat16).to(torch.float32), BH, PK, [1, 2])
    assert torch.equal(C.head_vectors(hidden.to(torch.bfloat16), BH, PK, [1, 2]), ref)


def test_rotation_is_orthogonal_and_batch_invariant() -> None:
    vectors = C.rotation_vectors(BH, PK, NONCES, 12)
    assert vectors.shape == (len(NONCES), 11, 12)
    x = torch.randn((len(NONCES), 12), generator=torch.Generator().manual_seed(3))
    y = C.rotate(x, vectors)
    assert torch.allclose(y.norm(dim=1), x.norm(dim=1), rtol=1e-5)
    for i in range(len(NONCES)):
        assert torch.equal(C.rotate(x[i : i + 1], vectors[i : i + 1])[0], y[i])


def test_layer_vectors_batch_equals_single_and_are_unit() -> None:
    layers = [0, 5, 93]
    batch = C.layer_vectors(BH, layers, 96)
    for row, layer in zip(batch, layers):
        assert torch.equal(row, C.layer_vector(BH, layer, 96))
    assert torch.allclose(batch.norm(dim=1), torch.ones(3), atol=1e-6)
    assert C.layer_vectors(BH, layers, 96, dtype=torch.bfloat16).dtype == torch.bfloat16


def test_reflection_is_a_householder_map() -> None:
    v = C.layer_vector(BH, 3, 32)
    x = torch.randn((5, 7, 32), generator=torch.Generator().manual_seed(4))
    y = C.reflect(x, v)
    assert torch.allclose(y, x - 2 * (x @ v).unsqueeze(-1) * v, atol=1e-5)
    assert torch.allclose(C.reflect(y, v), x, atol=1e-5)  # an involution
    hidden, residual = x[0], x[1]
    h2, r2 = C.reflect_stream(hidden, residual, v)
    assert r2 is not None
    assert torch.allclose(h2 + r2, C.reflect(hidden + residual, v), atol=1e-5)  # linear: the stream
    assert C.reflect_stream(hidden, None, v)[1] is None
    inplace = x.clone()
    assert C.reflect_(inplace, v) is inplace and torch.equal(inplace, y)
    bf = C.reflect(x.to(torch.bfloat16), v)
    assert bf.dtype == torch.bfloat16 and torch.allclose(bf.float(), y, atol=0.1)


def test_reflection_rounds_in_the_deployed_plugins_order() -> None:
    """poc-v2-models.md section 4.2: p = bf16(x*v); dot = bf16(sum(p)); d2 = bf16(2*dot); t = bf16(d2*v);
    y = bf16(x - t), written out here step by step in float32 with an explicit rounding after each."""

    def bf16(value: torch.Tensor) -> torch.Tensor:
        return value.to(torch.bfloat16).to(torch.float32)

    generator = torch.Generator().manual_seed(12)
    x = (torch.randn((64, 3072), generator=generator) * 4).to(torch.bfloat16)
    v = C.layer_vector(BH, 7, 3072, dtype=torch.bfloat16)
    xf, vf = x.float(), v.float()
    dot = bf16(bf16(xf * vf).sum(dim=-1, keepdim=True))  # float32 accumulation, one rounding
    expected = bf16(xf - bf16(bf16(2 * dot) * vf))
    assert torch.equal(C.reflect(x, v).float(), expected)
    # The order this project used before (a matmul dot, one addcmul) is not it, bit for bit.
    before = x.clone().addcmul_(torch.matmul(x, v).unsqueeze(-1), v, value=-2.0)
    assert not torch.equal(before, C.reflect(x, v))


def test_pairwise_sum_is_batch_invariant_and_accurate() -> None:
    x = torch.randn((9, 4097), generator=torch.Generator().manual_seed(5))
    sums = pairwise_sum(x)
    for i in range(9):
        assert torch.equal(pairwise_sum(x[i : i + 1])[0], sums[i])
    assert torch.allclose(sums.double(), x.double().sum(dim=1), atol=1e-3)
    assert torch.equal(pairwise_norm(torch.tensor([[3.0, 4.0]])), torch.tensor([5.0]))
    assert pairwise_sum(torch.empty((2, 0))).tolist() == [0.0, 0.0]
