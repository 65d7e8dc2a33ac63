"""Replay state through the persistent batch: rows added, removed, condensed and swapped, as vLLM reports them."""

from __future__ import annotations

import math

import torch
from vllm.sampling_params import SamplingParams
from vllm.v1.sample.logits_processor import BatchUpdate, MoveDirectionality

from engine_ext.generation.logprob_padding import pad_masked_entries
from engine_ext.generation.outputs import LogprobColumns
from engine_ext.generation.replay_rows import LOGPROBS_MODE_ARG, REPLAY_TOKENS_ARG, ReplayRows

RAW, PROCESSED = "raw_logprobs", "processed_logprobs"


def params(enforced: list[int] | None = None, mode: str | None = None, logprobs: int | None = 5) -> SamplingParams:
    extra = {}
    if enforced is not None:
        extra[REPLAY_TOKENS_ARG] = enforced
    if mode is not None:
        extra[LOGPROBS_MODE_ARG] = mode
    return SamplingParams(logprobs=logprobs, extra_args=extra or None)


def update(size: int, added=(), removed=(), moved=()) -> BatchUpdate:
    return BatchUpdate(batch_size=size, added=list(added), removed=list(removed), moved=list(moved))


def test_each_row_is_forced_to_its_own_next_token_wherever_it_moves() -> None:
    rows = ReplayRows(None, torch.device("cpu"), False)
    out_a, out_b = [], [11]
    rows.update_state(
        update(3, added=[(0, params([7, 8, 9]), [1], out_a), (2, params([20, 21]), [1], out_b), (1, params(), [1], [])])
    )
    sampled = torch.tensor([100, 101, 102])
    assert rows.enforce(sampled).tolist() == [7, 101, 21]  # b is at position 1
    out_a.append(7)
    out_b.append(21)  # past the end of b's list: its last token again
    rows.update_state(update(3, moved=[(0, 2, MoveDirectionality.SWAP)]))
    assert rows.enforce(sampled).tolist() == [21, 101, 8]
    rows.update_state(update(2, removed=[0], moved=[(2, 0, MoveDirectionality.UNIDIRECTIONAL)]))
    assert rows.enforce(torch.tensor([100, 101])).tolist() == [8, 101]
    assert sampled.tolist() == [100, 101, 102]  # the sampler's own tensor is left alone


def test_an_added_row_replaces_whatever_held_its_index() -> None:
    rows = ReplayRows(None, torch.device("cpu"), False)
    rows.update_state(update(1, added=[(0, params([5], RAW), [1], [])]))
    rows.update_state(update(1, added=[(0, params(), [1], [])]))  # reused without a removal
    assert rows.enforce(torch.tensor([3])).tolist() == [3]
    assert rows.logprobs_modes() == set()


def test_modes_are_counted_for_rows_that_want_logprobs() -> None:
    rows = ReplayRows(None, torch.device("cpu"), False)
    rows.update_state(
        update(
            3,
            added=[
                (0, params(mode=RAW), [1], []),
                (1, params(mode=PROCESSED), [1], []),
                (2, params(mode=RAW, logprobs=None), [1], []),
            ],
        )
    )
    assert rows.logprobs_modes() == {RAW, PROCESSED}
    assert rows.rows_in_mode(RAW, 3, torch.device("cpu")).tolist() == [True, False, False]
    rows.update_state(update(2, removed=[1]))
    assert rows.logprobs_modes() == {RAW}


def test_processed_lists_are_padded_with_the_lowest_free_ids() -> None:
    inf = -math.inf
    columns = LogprobColumns([-0.1, -0.2], [1, 1], [9, 0, 4, 7, 3, 5], [-0.1, -2.0, inf, -0.2, inf, inf])
    pad_masked_entries(columns, 3)
    # Position 0 keeps 9 and 0, so its masked place takes 1; position 1 keeps 7, then 0 and 1.
    assert columns.top_ids == [9, 0, 1, 7, 0, 1]
    assert columns.top_logprobs == [-0.1, -2.0, inf, -0.2, inf, inf]
