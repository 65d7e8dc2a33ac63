"""Every stage equals the conformance vectors (tests/data/conformance, a copy of ../shared/conformance): integers exactly, floats to 1e-6 relative, fraud-test
p-values to 1e-9 relative, distances to 1e-12."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

import engine_ext.consensus as C
from engine_ext.consensus.murmur import seeds_tensor

from .conformance import load_conformance

STAGES = load_conformance("poc_v2_stages.json")
CASES = STAGES["cases"]
K = STAGES["k_dim"]
CASE_IDS = [f"{c['block_hash']}:{c['nonce']}" for c in CASES]


def assert_floats(actual: list[float], expected: list[float], rel: float = 1e-6, abs_: float = 0.0) -> None:
    assert len(actual) == len(expected)
    for i, (a, e) in enumerate(zip(actual, expected)):
        assert math.isclose(a, e, rel_tol=rel, abs_tol=abs_), f"element {i}: {a} != {e}"


def flat(rows: list[list[float]]) -> list[float]:
    return [v for row in rows for v in row]


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
class TestStages:
    def test_seeds(self, case: dict[str, Any]) -> None:
        bh, pk, n = case["block_hash"], case["public_key"], case["nonce"]
        assert C.input_seed_string(bh, pk, n) == case["input_seed_string"]
        assert C.input_seed(bh, pk, n) == case["input_seed"]
        assert C.pick_seed(bh, pk, n, K) == case["pick_seed"]
        assert C.stronger_sub_seeds(bh, pk, n) == case["stronger_sub_seeds"]
        # The first stronger sub-seed is the input seed: both are the digest's first word.
        assert case["stronger_sub_seeds"][0] == case["input_seed"]

    def test_murmur_and_uniform(self, case: dict[str, Any]) -> None:
        seed = case["input_seed"]
        assert C.murmur3_32(torch.arange(8), seed).tolist() == case["murmur_keys_0_7"]
        assert_floats(C.uniform(seed, 8).tolist(), case["uniform_keys_0_7"])

    @pytest.mark.parametrize("n", [10, 9])
    def test_normal(self, case: dict[str, Any], n: int) -> None:
        assert_floats(C.normal(case["input_seed"], n).tolist(), case[f"normal_n{n}"])

    @pytest.mark.parametrize("stronger", [False, True], ids=["base", "stronger"])
    def test_inputs(self, case: dict[str, Any], stronger: bool) -> None:
        x = C.inputs_for_nonce(
            case["block_hash"], case["public_key"], case["nonce"], 4, 8, dtype=torch.float32, stronger_rng=stronger
        )
        key = "inputs_seq4_hidden8_stronger" if stronger else "inputs_seq4_hidden8_base"
        assert x.shape == (4, 8)
        assert_floats(flat(x.tolist()), flat(case[key]))

    @pytest.mark.parametrize("layer", [0, 5])
    def test_layer_vector(self, case: dict[str, Any], layer: int) -> None:
        v = C.layer_vector(case["block_hash"], layer, 16)
        assert_floats(v.tolist(), case[f"layer_vector_{layer}_hidden16"])

    @pytest.mark.parametrize("hidden", [128, 896, 4096])
    def test_pick(self, case: dict[str, Any], hidden: int) -> None:
        idx = C.pick_indices(case["block_hash"], case["public_key"], [case["nonce"]], hidden, K)
        assert idx[0].tolist() == case[f"pick_hidden{hidden}"]

    def test_rotation(self, case: dict[str, Any]) -> None:
        x = torch.tensor([case["haar_input_linspace_-1_1_12"]], dtype=torch.float32)
        assert torch.equal(x[0], torch.linspace(-1, 1, K))
        vectors = C.rotation_vectors(case["block_hash"], case["public_key"], [case["nonce"]], K)
        # The vectors' generator summed with torch's CPU sum; ours sums pairwise (batch-invariant), so
        # near-zero elements get an absolute floor of 1e-6 (the largest difference seen is 4.8e-7).
        assert_floats(C.rotate(x, vectors)[0].tolist(), case["haar_output"], abs_=1e-6)

    def test_head(self, case: dict[str, Any]) -> None:
        assert case["head_last_hidden"] == "normal(seed_of('conformance_last_hidden'), 128) * 3.0"
        hidden = C.normal(C.seed_of("conformance_last_hidden"), 128) * 3.0
        y = C.head_vectors(hidden.unsqueeze(0), case["block_hash"], case["public_key"], [case["nonce"]], K)
        assert y.dtype == torch.float16 and y.shape == (1, K)
        assert y[0].tolist() == case["head_vector_f16"]
        assert C.encode_vector(y[0]) == case["head_vector_b64"]
        assert C.decode_vector(case["head_vector_b64"], K).tolist() == case["head_vector_f16"]


def test_pick_seed_matches_its_string() -> None:
    case = CASES[0]
    text = C.pick_seed_string(case["block_hash"], case["public_key"], case["nonce"], K)
    assert text == f"{case['block_hash']}_{case['public_key']}_nonce_{case['nonce']}_pick_{K}"
    assert C.seed_of(text) == case["pick_seed"]


def test_seed_strings_follow_the_spec() -> None:
    assert C.input_seed_string("B", "P", -3) == "B_P_nonce-3"
    assert C.layer_seed_string("B", 7) == "B_layer_7_householder"
    assert C.rotation_seed_string("B", "P", 5, 12, 10) == "B_P_nonce_5_haar_hh_12_10"
    assert len(C.rotation_seeds("B", "P", 5, 12)) == 11
    assert seeds_tensor([0, 2**32 - 1], None).tolist() == [0, 2**32 - 1]


FRAUD = load_conformance("poc_stat_test.json")["cases"]


@pytest.mark.parametrize("case", FRAUD, ids=[f"{c['n_mismatch']}/{c['n_total']}@{c['p_mismatch']}" for c in FRAUD])
def test_fraud_test(case: dict[str, Any]) -> None:
    result = C.fraud_test(case["n_mismatch"], case["n_total"], case["p_mismatch"], case["fraud_threshold"])
    assert math.isclose(result.p_value, case["p_value"], rel_tol=1e-9, abs_tol=0.0)
    assert result.fraud_detected is case["fraud_detected"]


DISTANCE = load_conformance("inference_distance.json")["cases"]


def as_positions(raw: list[list[Any]]) -> list[tuple[int, dict[int, float]]]:
    return [(int(token), {int(t): float(lp) for t, lp in top.items()}) for token, top in raw]


@pytest.mark.parametrize("case", DISTANCE, ids=[c["name"] for c in DISTANCE])
def test_inference_distance(case: dict[str, Any]) -> None:
    distance = C.sequence_distance(as_positions(case["original"]), as_positions(case["validation"]), k=5)
    assert abs(distance - case["distance"]) <= 1e-12
    if case["distance"] < 0:
        assert C.similarity(distance) == 0.0
    else:
        assert C.similarity(distance) == pytest.approx(1.0 - case["distance"], abs=1e-12)
