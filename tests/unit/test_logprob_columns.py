"""vLLM FlatLogprobs -> TokenBatch columns, for both layouts vLLM can hand over."""

from __future__ import annotations

import math

from vllm.logprobs import FlatLogprobs, append_logprobs_for_next_position

from server.logprob_columns import REPORTED_NEG_INF, logprob_columns


def flat_positions(positions: list[tuple[int, float, int, list[tuple[int, float]]]], k: int) -> FlatLogprobs:
    """Each position: (chosen id, its logprob, its rank, top-k [(id, logprob)]) as vLLM's sampler emits it."""
    flat = FlatLogprobs()
    for chosen, logprob, rank, top in positions:
        ids = [chosen] + [token for token, _ in top]
        logprobs = [logprob] + [value for _, value in top]
        append_logprobs_for_next_position(flat, ids, logprobs, [None] * len(ids), rank, k)
    return flat


POSITIONS = [
    (7, -0.5, 1, [(7, -0.5), (3, -1.5), (9, -2.0)]),  # chosen is the top-1
    (4, -3.0, 6, [(1, -0.1), (2, -0.9), (5, -1.1)]),  # chosen is outside the top-3
    (2, -0.9, 2, [(1, -0.2), (2, -0.9), (8, -1.4)]),  # chosen is the top-2
]
EXPECTED = {
    "logprobs": [-0.5, -3.0, -0.9],
    "ranks": [1, 6, 2],
    "top_ids": [7, 3, 9, 1, 2, 5, 1, 2, 8],
    "top_logprobs": [-0.5, -1.5, -2.0, -0.1, -0.9, -1.1, -0.2, -0.9, -1.4],
}


def as_dict(columns) -> dict:
    return {name: getattr(columns, name) for name in EXPECTED}


def test_regular_layout_is_read_column_by_column() -> None:
    flat = flat_positions(POSITIONS, k=3)
    assert as_dict(logprob_columns(flat, [7, 4, 2], 0, 3)) == EXPECTED


def test_a_window_of_positions_is_read_from_its_offset() -> None:
    flat = flat_positions(POSITIONS, k=3)
    columns = logprob_columns(flat, [4, 2], 1, 3)
    assert columns.ranks == [6, 2] and columns.top_ids == EXPECTED["top_ids"][3:]


def test_merged_deltas_lose_the_duplicate_but_keep_the_same_columns() -> None:
    # A slow consumer makes vLLM merge deltas: FlatLogprobs.extend() re-appends positions through
    # dicts, which drop the chosen token's duplicate entry when it is in the top-k.
    merged = flat_positions(POSITIONS[:1], k=3)
    merged.extend(flat_positions(POSITIONS[1:], k=3))
    widths = [end - start for start, end in zip(merged.start_indices, merged.end_indices)]
    assert widths == [4, 4, 3]  # the layouts really differ from the regular [4, 4, 4]
    assert as_dict(logprob_columns(merged, [7, 4, 2], 0, 3)) == EXPECTED


def test_k_zero_gives_only_the_chosen_tokens_values() -> None:
    flat = flat_positions([(5, -1.25, 17, []), (6, -0.5, 2, [])], k=0)
    columns = logprob_columns(flat, [5, 6], 0, 0)
    assert (columns.logprobs, columns.ranks, columns.top_ids, columns.top_logprobs) == ([-1.25, -0.5], [17, 2], [], [])


def test_minus_infinity_is_reported_as_minus_9999() -> None:
    flat = flat_positions([(4, -math.inf, 151936, [(1, -0.1), (2, -math.inf)])], k=2)
    columns = logprob_columns(flat, [4], 0, 2)
    assert columns.logprobs == [REPORTED_NEG_INF] and columns.top_logprobs == [-0.1, REPORTED_NEG_INF]


def test_no_positions_give_empty_columns() -> None:
    assert as_dict(logprob_columns(flat_positions(POSITIONS, k=3), [], 0, 3)) == {name: [] for name in EXPECTED}
