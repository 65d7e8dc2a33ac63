"""vLLM's RequestOutputs -> GenerationSteps: FlatLogprobs as columns, for both layouts vLLM can hand over."""

from __future__ import annotations

import math

from vllm.logprobs import FlatLogprobs, append_logprobs_for_next_position
from vllm.outputs import CompletionOutput, RequestOutput

from engine_ext.generation.outputs import FinishReason
from engine_ext.generation.request_outputs import RequestOutputReader, finish_reason, logprob_columns


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


def test_minus_infinity_passes_through_unchanged() -> None:
    # Reporting it as -9999 is the wire's convention (server.services.response_encoding), not the engine's.
    flat = flat_positions([(4, -math.inf, 151936, [(1, -0.1), (2, -math.inf)])], k=2)
    columns = logprob_columns(flat, [4], 0, 2)
    assert columns.logprobs == [-math.inf] and columns.top_logprobs == [-0.1, -math.inf]


def test_every_finish_reason_of_vllm_has_a_project_reason() -> None:
    from vllm.v1.engine import FinishReason as VllmFinishReason

    # vLLM (0.20 and later) adds `repetition`, reported only to requests that ask for its repetition detection,
    # which this server never sets (engine_ext.generation.generation_request builds every SamplingParams).
    reported = [reason for reason in VllmFinishReason if str(reason) != "repetition"]
    assert [finish_reason(reason) for reason in reported] == list(FinishReason)
    assert finish_reason("length") is FinishReason.LENGTH  # RequestOutput carries the string form


def test_no_positions_give_empty_columns() -> None:
    assert as_dict(logprob_columns(flat_positions(POSITIONS, k=3), [], 0, 3)) == {name: [] for name in EXPECTED}


def request_output(token_ids, *, logprobs=None, finish=None, prompt_logprobs=None, index: int = 0) -> RequestOutput:
    completion = CompletionOutput(index, "text", token_ids, None, logprobs, finish_reason=finish)
    return RequestOutput(
        "r", None, [10, 11, 12], prompt_logprobs, [completion], finish is not None, num_cached_tokens=2
    )


def test_a_final_abort_without_tokens_ignores_the_history_vllm_attaches() -> None:
    # vLLM slices delta logprobs with [-len(new_tokens):], so an abort with no new token carries
    # every position's logprobs; none of them belongs to this step.
    reader = RequestOutputReader(top_logprobs=3, prompt_logprobs=None, include_text=False)
    reader.step(request_output([7, 4, 2], logprobs=flat_positions(POSITIONS, 3)))
    last = reader.step(request_output([], logprobs=flat_positions(POSITIONS, 3), finish="abort"))
    (delta,) = last.outputs
    assert last.finished and delta.token_ids == [] and delta.logprobs is None and delta.text == ""
    assert (delta.finish.reason, delta.finish.prompt_tokens, delta.finish.cached_tokens) == (FinishReason.ABORT, 3, 2)


def test_prompt_logprobs_come_once_from_position_one() -> None:
    prompt_flat = FlatLogprobs()
    prompt_flat.append(None)  # vLLM leaves position 0 (the unscored first token) empty
    prompt_flat.extend(
        flat_positions([(11, -2.0, 3, [(4, -0.5), (5, -1.0)]), (12, -0.1, 1, [(12, -0.1), (6, -3.0)])], k=2)
    )
    reader = RequestOutputReader(top_logprobs=None, prompt_logprobs=2, include_text=True)
    first = reader.step(request_output([5], prompt_logprobs=prompt_flat))
    assert first.prompt_logprobs.token_ids == [11, 12] and first.prompt_logprobs.logprobs.ranks == [3, 1]
    assert first.prompt_logprobs.logprobs.top_ids == [4, 5, 12, 6] and first.outputs[0].text == "text"
    assert reader.step(request_output([6], prompt_logprobs=prompt_flat)).prompt_logprobs is None
