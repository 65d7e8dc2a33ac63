"""Property-based tests (hypothesis): artifact codec, nonce iterator, inference distance, top-k lists,
logprobs-mode detection, murmur."""

from __future__ import annotations

import base64
import itertools
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import engine_ext.consensus as C

FAST = settings(max_examples=60, deadline=None)

f16_bits = st.integers(min_value=0, max_value=0xFFFF)
finite_f16 = f16_bits.map(lambda b: np.array([b], dtype=np.uint16).view(np.float16)[0]).filter(np.isfinite)


@FAST
@given(st.lists(finite_f16, min_size=1, max_size=40))
def test_codec_round_trips_every_finite_vector(values: list[np.float16]) -> None:
    vec = np.array(values, dtype=np.float16)
    text = C.encode_vector(vec)
    assert len(text) == 4 * -(-2 * len(vec) // 3)  # standard base64 with padding
    back = C.decode_vector(text, len(vec))
    assert back.dtype == np.float16 and back.view(np.uint16).tolist() == vec.view(np.uint16).tolist()
    assert C.encode_vector(torch.from_numpy(vec)) == text
    check = C.check_claimed_vector(vec, text, 0.0)
    assert not check.mismatch and check.distance == 0.0


@FAST
@given(st.lists(finite_f16, min_size=2, max_size=16), st.integers(min_value=1, max_value=3))
def test_codec_rejects_wrong_lengths(values: list[np.float16], extra: int) -> None:
    vec = np.array(values, dtype=np.float16)
    text = C.encode_vector(vec)
    for k in (len(vec) - 1, len(vec) + extra):
        check = C.check_claimed_vector(np.zeros(k, dtype=np.float16), text, 1e9)
        assert check.mismatch and "bytes" in check.reason


@FAST
@given(
    st.lists(finite_f16, min_size=1, max_size=16),
    st.integers(min_value=0, max_value=15),
    st.sampled_from([np.inf, -np.inf, np.nan]),
)
def test_non_finite_claims_are_mismatches(values: list[np.float16], pos: int, bad: float) -> None:
    vec = np.array(values, dtype=np.float16)
    claimed = vec.copy()
    claimed[pos % len(vec)] = bad
    check = C.check_claimed_vector(vec, C.encode_vector(claimed), 1e9)
    assert check.mismatch and "non-finite" in check.reason


@FAST
@given(
    st.lists(st.floats(-1, 1, width=16), min_size=12, max_size=12),
    st.lists(st.floats(-1, 1, width=16), min_size=12, max_size=12),
    st.floats(0, 3, width=32),
)
def test_distance_threshold_is_strict_on_fp16_vectors(a: list[float], b: list[float], threshold: float) -> None:
    ours = np.array(a, dtype=np.float16)
    theirs = np.array(b, dtype=np.float16)
    check = C.check_claimed_vector(ours, C.encode_vector(theirs), threshold)
    diff = ours.astype(np.float32) - theirs.astype(np.float32)
    distance = float(np.sqrt(np.sum(diff * diff, dtype=np.float32)))
    assert check.distance == distance
    assert check.mismatch is (distance > threshold)
    assert C.check_claimed_vector(ours, C.encode_vector(theirs), distance).mismatch is False


def test_invalid_base64_is_a_mismatch_not_a_crash() -> None:
    ours = np.zeros(12, dtype=np.float16)
    for text in ("not base64!!", "AAAA AAAA", "ä", base64.b64encode(b"\0" * 24).decode()[:-1]):
        assert C.check_claimed_vector(ours, text, 1.0).mismatch


assignments = st.integers(min_value=1, max_value=6).flatmap(
    lambda nodes: st.integers(min_value=1, max_value=4).flatmap(
        lambda groups: st.tuples(
            st.just(nodes),
            st.just(groups),
            st.integers(min_value=1, max_value=9),
            st.integers(min_value=1, max_value=5),
        )
    )
)


@FAST
@given(assignments)
def test_nonce_iterator_is_dense_disjoint_and_covering(assignment: tuple[int, int, int, int]) -> None:
    node_count, group_count, batch_size, n_batches = assignment
    owned: dict[tuple[int, int], list[int]] = {}
    for node_id, group_id in itertools.product(range(node_count), range(group_count)):
        batches = C.nonce_batches(node_id, node_count, group_id, group_count, batch_size)
        got = [n for batch in itertools.islice(batches, n_batches) for n in batch]
        assert got == [C.nonce_at(x, node_id, node_count, group_id, group_count) for x in range(len(got))]
        assert got == sorted(got) and len(got) == batch_size * n_batches
        owned[(node_id, group_id)] = got
    every = [n for nonces in owned.values() for n in nonces]
    assert len(set(every)) == len(every)  # disjoint across nodes and groups
    assert sorted(every) == list(range(len(every)))  # covers every nonce below the largest
    for nonces in owned.values():  # each owner stays dense: largest / count < 100 when it is used alone
        assert max(nonces) / len(nonces) < node_count * group_count


def test_nonce_iterator_stops_at_int32() -> None:
    node_count = 2**29  # a huge stride makes the int32 ceiling reachable in a few batches
    batches = list(C.nonce_batches(1, node_count, 0, 1, 3))
    flat = [n for b in batches for n in b]
    assert flat == [1, 1 + 2**29, 1 + 2**30, 1 + 3 * 2**29]
    assert max(flat) <= C.INT32_MAX and len(batches[-1]) == 1


token_ids = st.integers(min_value=0, max_value=50)
logprob = st.floats(min_value=-30, max_value=0, allow_nan=False)
topk_map = st.dictionaries(token_ids, logprob, min_size=1, max_size=6)
sequence = st.lists(st.tuples(token_ids, topk_map), min_size=0, max_size=30)


@FAST
@given(sequence)
def test_distance_is_zero_on_identical_inputs(seq: list[tuple[int, dict[int, float]]]) -> None:
    assert C.sequence_distance(seq, seq) == 0.0
    assert C.similarity(C.sequence_distance(seq, seq)) == 1.0


@FAST
@given(sequence)
def test_distance_is_symmetric_when_the_lists_share_their_tokens(seq: list[tuple[int, dict[int, float]]]) -> None:
    # With the same token set on both sides no fill value is used, and each term is symmetric in (v, o).
    other = [(t, {tok: lp * 0.9 - 0.01 for tok, lp in top.items()}) for t, top in seq]
    # Symmetric up to the rounding of 1e-6 + |v| + |o|, whose addition order swaps.
    forward = C.sequence_distance(seq, other)
    assert math.isclose(forward, C.sequence_distance(other, seq), rel_tol=1e-12, abs_tol=1e-18)
    assert forward >= 0.0


@FAST
@given(sequence.filter(lambda s: len(s) > 0), st.data())
def test_distance_is_minus_one_when_tokens_differ(seq: list[tuple[int, dict[int, float]]], data: st.DataObject) -> None:
    i = data.draw(st.integers(min_value=0, max_value=len(seq) - 1))
    changed = list(seq)
    changed[i] = (seq[i][0] + 1, seq[i][1])
    assert C.sequence_distance(seq, changed) == -1.0
    assert C.sequence_distance(seq, seq[:-1]) == -1.0
    assert C.similarity(-1.0) == 0.0
    assert C.inference_passes(C.similarity(-1.0), 0.94) is False


def test_distance_normalizes_by_at_least_100_positions() -> None:
    original = [(1, {1: -0.5, 2: -1.0, 3: -2.0})]
    validation = [(1, {1: -0.5, 2: -1.0, 4: -3.0})]  # token 4 is missing from O: o = fill = -3.0
    d = C.position_distance(original[0][1], validation[0][1])
    assert d == 0.0  # fill = m1 - (m2 - m1) = -2 - (-1 + 2) = -3
    one = [(1, {1: -1.0})]  # a single entry: m2 = m1 - 100, so fill = m1 + 100 = 99
    assert C.position_distance(one[0][1], {2: -1.0}) == abs(-1.0 - 99.0) / (1e-6 + 1.0 + 99.0) / 2
    expected = 3 * (100 / (1e-6 + 100) / 2) / (100 * 5)  # 3 positions still divide by 100 * k
    assert abs(C.sequence_distance(one * 3, [(1, {2: -1.0})] * 3, k=5) - expected) < 1e-15


@FAST
@given(
    st.integers(min_value=0, max_value=99),
    logprob,
    st.lists(st.tuples(token_ids, logprob), min_size=6, max_size=8, unique_by=lambda e: e[0]),
    st.integers(min_value=1, max_value=5),
)
def test_topk_list_is_sampled_first_then_model_ranks(
    sampled: int, lp: float, model: list[tuple[int, float]], k: int
) -> None:
    entries = C.build_topk_list(sampled, lp, model, k)
    assert len(entries) == k and len({t for t, _ in entries}) == k
    assert entries[0] == (sampled, lp)
    rest = [e for e in model if e[0] != sampled][: k - 1]
    assert entries[1:] == rest


def test_topk_list_reports_minus_inf_as_minus_9999() -> None:
    entries = C.build_topk_list(5, float("-inf"), [(5, float("-inf")), (0, float("-inf")), (1, -2.0)], 3)
    assert entries == [(5, -9999.0), (0, -9999.0), (1, -2.0)]
    assert C.build_topk_list(7, -1.5, [(3, -0.1), (7, -1.5), (9, -4.0)], 3) == [(7, -1.5), (3, -0.1), (9, -4.0)]


def test_the_chain_keeps_finite_logprobs_below_the_floor_the_http_api_floors_them() -> None:
    assert C.reported_logprob(float("-inf")) == C.floored_logprob(float("-inf")) == -9999.0
    assert C.reported_logprob(-12000.5) == -12000.5
    assert C.floored_logprob(-12000.5) == -9999.0
    assert C.reported_logprob(-3.25) == C.floored_logprob(-3.25) == -3.25


@FAST
@given(st.lists(st.lists(st.integers(min_value=0, max_value=1000), min_size=1, max_size=5), max_size=10))
def test_logprobs_mode_detection_follows_the_share_of_low_ids(positions: list[list[int]]) -> None:
    ids = [t for p in positions for t in p]
    mode = C.detect_logprobs_mode(positions)
    if len(ids) < 10:
        assert mode is None
        assert C.resolve_logprobs_mode(None, positions) == C.ModeResolution(C.DEFAULT_MODE, C.ModeSource.DEFAULT)
    else:
        low = sum(t < 4 for t in ids) / len(ids)
        assert mode is (C.LogprobsMode.PROCESSED if low > 0.10 else C.LogprobsMode.RAW)
        assert C.resolve_logprobs_mode(None, positions) == C.ModeResolution(mode, C.ModeSource.PADDING)
    assert C.resolve_logprobs_mode("raw_logprobs", positions) == C.ModeResolution(C.LogprobsMode.RAW, C.ModeSource.ITEM)


def test_logprobs_mode_detection_examples() -> None:
    processed = [{900: -0.1, 0: -9999.0, 1: -9999.0, 2: -9999.0, 3: -9999.0}] * 3
    raw = [{900 + i: -0.1 * i for i in range(5)}] * 3
    assert C.detect_logprobs_mode(processed) is C.LogprobsMode.PROCESSED
    assert C.detect_logprobs_mode(raw) is C.LogprobsMode.RAW
    assert C.resolve_logprobs_mode(C.LogprobsMode.RAW, processed).mode is C.LogprobsMode.RAW
    assert C.DEFAULT_MODE is C.LogprobsMode.PROCESSED


RAW, PROCESSED = C.LogprobsMode.RAW, C.LogprobsMode.PROCESSED


def test_the_mode_priority_is_item_then_request_then_replay_then_padding_then_default() -> None:
    padded = [{900: -0.1, 0: -9999.0, 1: -9999.0, 2: -9999.0, 3: -9999.0}] * 3
    clearly_raw = {RAW: 0.0, PROCESSED: 0.2}
    resolve = C.resolve_logprobs_mode
    assert resolve(PROCESSED, padded, request_mode=RAW, replay_distances=clearly_raw) == C.ModeResolution(
        PROCESSED, C.ModeSource.ITEM
    )
    assert resolve(None, padded, request_mode=RAW) == C.ModeResolution(RAW, C.ModeSource.REQUEST)
    assert resolve(None, padded, replay_distances=clearly_raw) == C.ModeResolution(RAW, C.ModeSource.REPLAY)
    assert resolve(None, padded, replay_distances={RAW: 0.1, PROCESSED: 0.1}) == C.ModeResolution(
        PROCESSED, C.ModeSource.PADDING
    )
    assert resolve(None, padded, replay_distances={RAW: 0.06, PROCESSED: 0.08}) == C.ModeResolution(
        PROCESSED, C.ModeSource.STRICTER
    )
    assert resolve(None, [], RAW, replay_distances={RAW: 0.0, PROCESSED: 0.0}) == C.ModeResolution(
        RAW, C.ModeSource.DEFAULT
    )
    assert C.stated_logprobs_mode(None, None) is None
    assert resolve(None, padded, replay_distances=clearly_raw).detected and not resolve(RAW, padded).detected


REPLAY, STRICTER = C.ModeSource.REPLAY, C.ModeSource.STRICTER


@pytest.mark.parametrize(
    ("raw", "processed", "expected"),
    [
        (0.0, 1e-7, (RAW, REPLAY)),  # an honest raw record on the validator's own engine
        (0.3, 0.0, (PROCESSED, REPLAY)),
        (0.02, 0.041, (RAW, REPLAY)),  # an honest record across hardware: noise well under the other mode's distance
        (0.05, 0.1, (RAW, REPLAY)),  # exactly the decisive ratio
        (0.06, 0.08, (PROCESSED, STRICTER)),  # a record scaled away from both: judged where it matches worse
        (5.1e-4, 5e-4, (RAW, STRICTER)),  # near-identical modes (top-k 20 on a flat distribution)
        (0.0, 0.0, None),  # identical lists: greedy, temperature 1 with nothing masked (the padding count decides)
        (-1.0, -1.0, None),  # the tokens differ: no distance at all
        (math.nan, 0.0, None),
    ],
)
def test_the_replay_names_the_mode_a_record_matches_clearly_better_else_the_stricter(
    raw: float, processed: float, expected
) -> None:
    resolution = C.replay_logprobs_mode({RAW: raw, PROCESSED: processed})
    assert (None if resolution is None else (resolution.mode, resolution.source)) == expected


@FAST
@given(st.floats(min_value=0, max_value=2), st.floats(min_value=0, max_value=2), st.sampled_from([RAW, PROCESSED]))
def test_an_unstated_mode_never_helps_a_record_that_fails_in_its_own_mode_unless_it_matches_the_other_clearly(
    raw: float, processed: float, made_in
) -> None:
    """The judged distance is the record's own mode's, or larger, except where the other mode is decisively nearer."""
    distances = {RAW: raw, PROCESSED: processed}
    judged = C.resolve_logprobs_mode(None, [], replay_distances=distances)
    other = PROCESSED if made_in is RAW else RAW
    decisive_other = judged.source is C.ModeSource.REPLAY and judged.mode is other
    assert decisive_other or distances[judged.mode] >= distances[made_in] or raw == processed


@FAST
@given(st.integers(min_value=0, max_value=2**32 - 1))
def test_murmur_is_a_bijection_of_the_key_and_batches_over_seeds(seed: int) -> None:
    keys = torch.arange(5000)
    hashes = C.murmur3_32(keys, seed)
    assert len(set(hashes.tolist())) == 5000 and int(hashes.min()) >= 0 and int(hashes.max()) <= 2**32 - 1
    both = C.murmur3_32(keys, torch.tensor([[seed], [seed ^ 1]]))
    assert torch.equal(both[0], hashes) and torch.equal(both[1], C.murmur3_32(keys, seed ^ 1))


def test_modes_are_indistinguishable_when_the_replays_two_lists_are_no_farther_apart_than_the_record_is() -> None:
    assert C.modes_indistinguishable(0.0, {})  # identical lists: greedy, temperature 1 with nothing masked
    assert C.modes_indistinguishable(1e-5, {RAW: 5e-4, PROCESSED: 5.1e-4})  # top-k 20 on a peaked model: within noise
    assert not C.modes_indistinguishable(0.1, {RAW: 5e-4, PROCESSED: 0.1})  # temperature 0.7: far apart
    assert not C.modes_indistinguishable(1e-5, {RAW: -1.0, PROCESSED: -1.0})  # no distances (the tokens differ)
