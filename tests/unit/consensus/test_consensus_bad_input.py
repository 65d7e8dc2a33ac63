"""Bad input raises a clear exception naming the problem."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import engine_ext.consensus as C

BH, PK = "B", "P"


@pytest.mark.parametrize("k", [0, 1, 129, -3])
def test_k_outside_2_to_hidden(k: int) -> None:
    with pytest.raises(ValueError, match=r"k \(k_dim\) must be in \[2, hidden=128\]"):
        C.pick_indices(BH, PK, [0], 128, k)
    with pytest.raises(ValueError, match="k_dim"):
        C.head_vectors(torch.ones((1, 128)), BH, PK, [0], k)


def test_k_must_be_an_int() -> None:
    with pytest.raises(TypeError, match="k must be an int"):
        C.check_k(12.0, 128)  # type: ignore[arg-type]


@pytest.mark.parametrize("seq_len", [0, -1])
def test_seq_len_below_one(seq_len: int) -> None:
    with pytest.raises(ValueError, match="seq_len must be >= 1"):
        C.inputs_for_nonce(BH, PK, 0, seq_len, 8, dtype=torch.bfloat16)
    if seq_len == 0:
        with pytest.raises(ValueError, match="seq_len must be >= 1"):
            C.generate_inputs(torch.empty((1, 0, 8)), BH, PK, [0])


def test_hidden_below_one() -> None:
    with pytest.raises(ValueError, match="hidden must be >= 1"):
        C.inputs_for_nonce(BH, PK, 0, 4, 0, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="hidden must be >= 1"):
        C.layer_vectors(BH, [0], 0)


def test_inputs_shape_dtype_and_layout() -> None:
    with pytest.raises(ValueError, match="2 rows but 3 nonces"):
        C.generate_inputs(torch.empty((2, 4, 8)), BH, PK, [0, 1, 2])
    with pytest.raises(ValueError, match=r"\[batch, seq_len, hidden\]"):
        C.generate_inputs(torch.empty((2, 32)), BH, PK, [0, 1])
    with pytest.raises(TypeError, match="floating dtype"):
        C.generate_inputs(torch.empty((1, 4, 8), dtype=torch.int32), BH, PK, [0])
    with pytest.raises(ValueError, match="contiguous"):
        C.generate_inputs(torch.empty((1, 8, 4)).transpose(1, 2), BH, PK, [0])
    with pytest.raises(TypeError, match="nonce must be an int"):
        C.generate_inputs(torch.empty((1, 4, 8)), BH, PK, ["7"])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="nonce must be an int"):
        C.input_seed(BH, PK, True)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="block_hash must be a str"):
        C.input_seed(b"B", PK, 1)  # type: ignore[arg-type]


def test_rng_arguments() -> None:
    with pytest.raises(ValueError, match="n must be >= 0"):
        C.normal(1, -1)
    with pytest.raises(ValueError, match=r"seed must be an int in \[0, 2\^32\)"):
        C.normal(2**32, 4)
    with pytest.raises(ValueError, match=r"seed must be an int in \[0, 2\^32\)"):
        C.normal_rows([-1], 4)
    with pytest.raises(ValueError, match="unknown backend"):
        C.normal(1, 4, backend="triton")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="needs a CUDA device"):
        C.normal(1, 4, device="cpu", backend="cuda_fused")
    with pytest.raises(ValueError, match="tile_elements must be >= 2"):
        C.fill_normal_rows(torch.empty((2, 8)), [1, 2], tile_elements=1)
    with pytest.raises(ValueError, match="3 seeds for 2 rows"):
        C.fill_normal_rows(torch.empty((2, 8)), [1, 2, 3])
    with pytest.raises(TypeError, match="integer tensor"):
        C.murmur3_32(torch.arange(4.0), 1)


def test_rotation_step_and_shapes() -> None:
    with pytest.raises(ValueError, match=r"rotation step must be in \[0, k-2\]"):
        C.rotation_seed_string(BH, PK, 0, 12, 11)
    with pytest.raises(ValueError, match=r"needs vectors \[B, k-1, k\]"):
        C.rotate(torch.ones((2, 12)), torch.ones((2, 12, 12)))
    with pytest.raises(ValueError, match="does not match hidden size"):
        C.reflect(torch.ones((3, 16)), torch.ones(8))


def test_head_batch_shape_and_the_per_nonce_rule() -> None:
    with pytest.raises(ValueError, match=r"\[batch, hidden\]"):
        C.head_vectors(torch.ones(64), BH, PK, [0])
    with pytest.raises(ValueError, match="2 rows but 1 nonces"):
        C.head_vectors(torch.ones((2, 64)), BH, PK, [0])
    plan = C.head_plan(BH, PK, [0, 1], 64)
    with pytest.raises(ValueError, match="3 rows but 2 nonces"):
        C.planned_head_vectors(torch.ones((3, 64)), plan)
    with pytest.raises(ValueError, match="32 wide but the head plan was made for 64"):
        C.planned_head_vectors(torch.ones((2, 32)), plan)
    # poc-v2-models.md section 5: a nonce whose hidden row is non-finite, or whose vector would be non-finite or all
    # zero, has no artifact; the other nonces of the batch keep theirs, the same bits as without it.
    hidden = torch.randn((4, 64), generator=torch.Generator().manual_seed(8))
    alone = C.head_vectors(hidden[:1], BH, PK, [0])
    for bad, outcome in (
        (math.nan, C.HeadOutcome.NON_FINITE_HIDDEN),
        (math.inf, C.HeadOutcome.NON_FINITE_HIDDEN),
        (-math.inf, C.HeadOutcome.NON_FINITE_HIDDEN),
    ):
        broken = hidden.clone()
        broken[2, 17] = bad
        with pytest.raises(C.UncomputedNonceError, match=f"1 of 3 nonces \\(2: {outcome.name}\\)"):
            C.head_vectors(broken[:3].to(torch.bfloat16), BH, PK, [0, 1, 2])
        vectors, outcomes = C.unchecked_head_vectors(broken[:3], C.head_plan(BH, PK, [0, 1, 2], 64))
        assert C.head_outcomes(outcomes) == [C.HeadOutcome.COMPUTED, C.HeadOutcome.COMPUTED, outcome]
        assert torch.equal(vectors[0], alone[0]) and not vectors[2].any()
    zero = hidden.clone()
    zero[1] = 0.0
    huge = hidden.clone()
    huge[3] = 3e38  # finite, but its norm overflows float32: every coordinate divides to 0
    vectors, outcomes = C.unchecked_head_vectors(torch.cat((zero[:2], huge[3:])), C.head_plan(BH, PK, [0, 1, 3], 64))
    assert C.head_outcomes(outcomes) == [C.HeadOutcome.COMPUTED, C.HeadOutcome.ZERO_VECTOR, C.HeadOutcome.ZERO_VECTOR]
    assert torch.isfinite(vectors).all() and torch.equal(vectors[0], alone[0])


def test_artifact_arguments() -> None:
    vec = np.zeros(12, dtype=np.float16)
    text = C.encode_vector(vec)
    for bad in (math.nan, math.inf, -math.inf):
        with pytest.raises(ValueError, match="dist_threshold must be finite"):
            C.check_claimed_vector(vec, text, bad)
    with pytest.raises(ValueError, match="dist_threshold must be >= 0"):
        C.check_claimed_vector(vec, text, -0.1)
    with pytest.raises(TypeError, match="must be float16"):
        C.encode_vector(np.zeros(12, dtype=np.float32))
    with pytest.raises(ValueError, match="must be 1-D"):
        C.encode_vector(np.zeros((2, 6), dtype=np.float16))
    with pytest.raises(ValueError, match=r"must be \[B, k\]"):
        C.encode_vectors(np.zeros(12, dtype=np.float16))
    with pytest.raises(ValueError, match="computed vector holds a non-finite value"):
        C.check_claimed_vector(np.full(12, np.nan, dtype=np.float16), text, 0.2)
    with pytest.raises(C.ArtifactDecodeError, match="decodes to 24 bytes, expected 26"):
        C.decode_vector(text, 13)
    with pytest.raises(C.ArtifactDecodeError, match="not valid base64"):
        C.decode_vector("@@@@", 12)
    with pytest.raises(ValueError, match="k must be >= 1"):
        C.encoding_metadata(0)
    assert C.encoding_metadata(12) == {"dtype": "f16", "k_dim": 12, "endian": "le"}
    assert C.encode_vectors(np.zeros((2, 12), dtype=np.float16)) == [text, text]


@pytest.mark.parametrize("p", [0.0, 1.0, -0.1, 1.5, math.nan, math.inf])
def test_p_mismatch_outside_0_1(p: float) -> None:
    with pytest.raises(ValueError, match="p_mismatch must be"):
        C.fraud_test(3, 10, p, 0.05)


@pytest.mark.parametrize("threshold", [math.nan, math.inf, -math.inf])
def test_non_finite_thresholds(threshold: float) -> None:
    with pytest.raises(ValueError, match="fraud_threshold must be finite"):
        C.fraud_test(3, 10, 0.1, threshold)
    with pytest.raises(ValueError, match="threshold must be finite"):
        C.inference_passes(0.99, threshold)


def test_fraud_counts() -> None:
    with pytest.raises(ValueError, match=r"n_mismatch \(11\) cannot exceed n_total \(10\)"):
        C.fraud_test(11, 10, 0.1, 0.05)
    with pytest.raises(ValueError, match="n_mismatch must be >= 0"):
        C.fraud_test(-1, 10, 0.1, 0.05)
    with pytest.raises(TypeError, match="n_total must be an int"):
        C.fraud_test(1, 10.0, 0.1, 0.05)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"fraud_threshold is a p-value threshold in \[0, 1\]"):
        C.fraud_test(1, 10, 0.1, 1.5)
    assert C.fraud_test(0, 0, 0.1, 0.05) == (1.0, False)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((0, 0, 0, 1, 4), "node_count must be >= 1"),
        ((2, 2, 0, 1, 4), r"node_id must be in \[0, node_count=2\)"),
        ((-1, 2, 0, 1, 4), r"node_id must be in \[0, node_count=2\)"),
        ((0, 2, 1, 1, 4), r"group_id must be in \[0, group_count=1\)"),
        ((0, 2, 0, 0, 4), "group_count must be >= 1"),
        ((0, 2, 0, 1, 0), "batch_size must be >= 1"),
    ],
)
def test_nonce_assignment(args: tuple[int, int, int, int, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        C.nonce_batches(*args)
    with pytest.raises(ValueError, match="x must be >= 0"):
        C.nonce_at(-1, 0, 1, 0, 1)


def test_distance_and_lists() -> None:
    with pytest.raises(ValueError, match="top-k list of a position is empty"):
        C.position_distance({}, {1: -0.1})
    with pytest.raises(ValueError, match="k must be >= 1"):
        C.sequence_distance([], [], k=0)
    with pytest.raises(ValueError, match="too short to build a top-3 list"):
        C.build_topk_list(1, -0.5, [(1, -0.5), (2, -1.0)], 3)
    with pytest.raises(ValueError, match="unknown logprobs mode 'fast'"):
        C.resolve_logprobs_mode("fast", [])
    with pytest.raises(ValueError, match="unknown logprobs mode 'slow'"):
        C.resolve_logprobs_mode(None, [], request_mode="slow")
    for distance in (math.nan, math.inf, -math.inf, -1.0, -0.5):
        assert C.similarity(distance) == 0.0
