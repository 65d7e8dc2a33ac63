"""Whether a ValidateInference replay may be judged: only one that ended at the record's own end (server.services.inference_replay),
and how a replay that asked for both logprobs modes carries them (engine_ext.generation.both_logprobs_modes)."""

from __future__ import annotations

import grpc
import pytest

from engine_ext.generation.both_logprobs_modes import both_modes_width, split_both_modes
from engine_ext.generation.outputs import Finish, FinishReason, LogprobColumns
from server.poc.gate.admission import Admission
from server.services.inference_replay import replay_end_error


def finish(reason: FinishReason) -> Finish:
    return Finish(reason, None, 7, 0)


@pytest.mark.parametrize(
    ("reason", "replayed", "recorded", "stated_max_tokens"),
    [
        (FinishReason.STOP, 12, 20, None),  # an end of sequence inside the record: the executor's LENGTH_DIFFERS
        (FinishReason.STOP, 21, 20, None),  # the appended end of sequence
        (FinishReason.LENGTH, 16, 20, 16),  # the request's own max_tokens
        (FinishReason.LENGTH, 20, 20, None),  # the whole record
    ],
)
def test_a_replay_that_reached_the_records_own_end_is_judged(
    reason: FinishReason, replayed: int, recorded: int, stated_max_tokens
) -> None:
    assert replay_end_error(finish(reason), replayed, recorded, stated_max_tokens, Admission()) is None


def test_a_replay_cut_short_on_this_node_is_an_item_error() -> None:
    admission = Admission()
    aborted = replay_end_error(finish(FinishReason.ABORT), 5, 20, None, admission)
    failed = replay_end_error(finish(FinishReason.ERROR), 5, 20, None, admission)
    unfinished = replay_end_error(None, 5, 20, None, admission)
    context = replay_end_error(finish(FinishReason.LENGTH), 9, 20, None, admission)
    for error in (aborted, failed, unfinished):
        assert (error.code, error.reason_name) == (grpc.StatusCode.UNAVAILABLE, "REPLAY_INCOMPLETE")
    assert (context.code, context.reason_name, context.field) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "CONTEXT_LENGTH_EXCEEDED",
        "positions.token_ids",
    )
    admission.gate.close("round-1")
    assert replay_end_error(finish(FinishReason.ABORT), 5, 20, None, admission).reason_name == "POC_PREEMPTED"
    admission.close()
    stopping = replay_end_error(finish(FinishReason.ABORT), 5, 20, None, admission)
    assert (stopping.code, stopping.reason_name, stopping.retry_after_seconds is not None) == (
        grpc.StatusCode.UNAVAILABLE,
        "SHUTTING_DOWN",
        True,
    )


def test_both_modes_ride_in_one_list_and_split_back() -> None:
    k = 2
    # Per position: [processed top-1, top-2 | chosen (raw), raw top-1, top-2] after the chosen (processed) entry.
    columns = LogprobColumns(
        logprobs=[-0.1, -0.3],
        ranks=[1, 2],
        top_ids=[5, 9, 5, 5, 9, 7, 4, 7, 4, 8],
        top_logprobs=[-0.1, float("-inf"), -0.2, -0.2, -1.9, -0.4, -0.6, -0.5, -0.6, -1.2],
    )
    assert both_modes_width(k) == 5
    processed, raw = split_both_modes(columns, k)
    assert processed.logprobs == [-0.1, -0.3] and processed.ranks == [1, 2]
    assert processed.top_ids == [5, 0, 7, 4]  # the masked entry padded with the lowest free id, as processed lists are
    assert processed.top_logprobs == [-0.1, float("-inf"), -0.4, -0.6]
    assert raw.logprobs == [-0.2, -0.5] and raw.top_ids == [5, 9, 4, 8] and raw.top_logprobs == [-0.2, -1.9, -0.6, -1.2]
