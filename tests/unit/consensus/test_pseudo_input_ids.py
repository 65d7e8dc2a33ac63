"""DeepSeek-V4's pseudo input ids equal the spec's frozen reference vectors (poc-v2-models.md section 2.2, the
deployed plugin's "convention v1"), and the list it derives for the network checkpoint's vocabulary."""

from __future__ import annotations

import torch

import engine_ext.consensus as C

BH, PK = "poc_ids_convention_v1_block", "poc_ids_convention_v1_pubkey"
VOCAB = 163840
NETWORK_VOCAB = 129280
# Nonce 0, t = 0..15 at the network checkpoint's vocabulary (the spec computes it from the formula; not published).
NETWORK_VOCAB_NONCE_0_IDS = (
    46086,
    20499,
    47137,
    122650,
    25789,
    22982,
    38531,
    116241,
    100057,
    96629,
    28283,
    73428,
    32379,
    117571,
    91490,
    77053,
)


def test_the_seeds_are_the_specs() -> None:
    assert (
        C.input_ids_seed_string(BH, PK, 0)
        == "poc_ids_convention_v1_block_poc_ids_convention_v1_pubkey_nonce0_input_ids"
    )
    assert [C.input_ids_seed(BH, PK, nonce) for nonce in (0, 1)] == [2980507924, 2917457512]


def test_the_first_sixteen_ids_of_two_nonces_are_the_specs() -> None:
    ids = C.pseudo_input_ids(BH, PK, [0, 1], 16, VOCAB)
    assert ids.dtype == torch.int32 and ids.shape == (32,)
    assert ids[:16].tolist() == [
        119046,
        160019,
        98337,
        39450,
        94909,
        163782,
        59011,
        57361,
        156377,
        36469,
        139643,
        43988,
        50299,
        147011,
        12130,
        86013,
    ]
    assert ids[16:].tolist() == [
        137719,
        146475,
        40370,
        95731,
        105609,
        72910,
        88608,
        153625,
        112488,
        156080,
        83284,
        17839,
        70977,
        48769,
        15417,
        65900,
    ]


def test_256_ids_of_nonce_0_sum_min_max() -> None:
    ids = C.pseudo_input_ids(BH, PK, [0], 256, VOCAB).long()
    assert (int(ids.sum()), int(ids.min()), int(ids.max())) == (20594062, 181, 163834)


def test_the_network_vocabulary() -> None:
    ids = C.pseudo_input_ids(BH, PK, [0], 16, NETWORK_VOCAB)
    assert ids.tolist() == list(NETWORK_VOCAB_NONCE_0_IDS)


def test_a_batch_is_nonce_major_and_each_nonce_its_own() -> None:
    batch = C.pseudo_input_ids(BH, PK, [5, -3, 5], 7, 1000)
    alone = [C.pseudo_input_ids(BH, PK, [nonce], 7, 1000) for nonce in (5, -3)]
    assert torch.equal(batch.view(3, 7)[0], alone[0]) and torch.equal(batch.view(3, 7)[2], alone[0])
    assert torch.equal(batch.view(3, 7)[1], alone[1])
    assert int(batch.min()) >= 0 and int(batch.max()) < 1000
