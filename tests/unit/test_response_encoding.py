"""GenerationSteps (the engine wrapper's output on both paths) -> GenerateResponse messages."""

from __future__ import annotations

import math

from engine_ext.consensus.logprobs_mode import LogprobsMode
from engine_ext.generation.generation_request import GenerationRequest
from engine_ext.generation.outputs import (
    Finish,
    FinishReason,
    GenerationStep,
    LogprobColumns,
    OutputDelta,
    PromptLogprobs,
)
from gonka.mlnode.v1 import inference_pb2 as pb
from server.services.response_encoding import ResponseEncoder
from server.translation import GenerationPlan

PROMPT = [10, 11, 12]
COLUMNS = LogprobColumns(
    logprobs=[-0.5, -3.0, -0.9],
    ranks=[1, 6, 2],
    top_ids=[7, 3, 9, 1, 2, 5, 1, 2, 8],
    top_logprobs=[-0.5, -1.5, -2.0, -0.1, -0.9, -1.1, -0.2, -0.9, -1.4],
)


def plan(top_logprobs: int | None = None, chunk: int = 0, prompt_logprobs: int | None = None) -> GenerationPlan:
    request = GenerationRequest("r", PROMPT, top_logprobs=top_logprobs, prompt_logprobs=prompt_logprobs)
    return GenerationPlan(request=request, max_tokens_per_message=chunk, coalesce_seconds=0.0, constraint_field=None)


def finish(reason: FinishReason, stop_reason: int | str | None = None, cached: int = 0) -> Finish:
    return Finish(reason, stop_reason, len(PROMPT), cached)


def step(
    token_ids, *, index=0, text="", logprobs=None, finished: Finish | None = None, prompt_logprobs=None
) -> GenerationStep:
    return GenerationStep(
        [OutputDelta(index, token_ids, logprobs, text, finished)], finished is not None, prompt_logprobs
    )


def test_a_delta_is_split_into_messages_of_at_most_the_asked_size() -> None:
    messages = ResponseEncoder("r", plan(top_logprobs=3, chunk=2)).encode(step([7, 4, 2], logprobs=COLUMNS))
    assert [list(m.tokens.ids) for m in messages] == [[7, 4], [2]]
    assert list(messages[1].tokens.top_ids) == [1, 2, 8] and list(messages[1].tokens.ranks) == [2]
    assert all(m.request_id == "r" and m.tokens.top_k == 3 and not m.HasField("finish") for m in messages)


def test_the_last_message_of_an_output_carries_finish_and_usage() -> None:
    encoder = ResponseEncoder("r", plan())
    assert encoder.encode(step([5, 6], text="ab"))[0].text == "ab"
    last = encoder.encode(step([9], text="c", finished=finish(FinishReason.STOP, "<end>", cached=2)))
    assert len(last) == 1 and last[0].text == "c"
    done = last[0].finish
    assert done.reason == pb.FINISH_REASON_STOP and done.stop_string == "<end>"
    assert (done.usage.prompt_tokens, done.usage.completion_tokens, done.usage.cached_tokens) == (3, 3, 2)


def test_stop_token_and_length_and_abort_finishes() -> None:
    by_token = ResponseEncoder("r", plan()).encode(step([3], finished=finish(FinishReason.STOP, 151645)))[0].finish
    assert by_token.WhichOneof("stop_reason") == "stop_token_id" and by_token.stop_token_id == 151645
    eos = ResponseEncoder("r", plan()).encode(step([3], finished=finish(FinishReason.STOP)))[0].finish
    assert eos.WhichOneof("stop_reason") is None
    assert (
        ResponseEncoder("r", plan()).encode(step([3], finished=finish(FinishReason.LENGTH)))[0].finish.reason
        == pb.FINISH_REASON_LENGTH
    )
    aborted = ResponseEncoder("r", plan(top_logprobs=3)).encode(step([], finished=finish(FinishReason.ABORT)))
    assert len(aborted) == 1 and not aborted[0].tokens.ids and aborted[0].finish.reason == pb.FINISH_REASON_ABORT


def test_the_finish_says_the_logprobs_mode_the_output_ran_in() -> None:
    def finish_mode(request: GenerationRequest, default: LogprobsMode) -> int:
        encoder = ResponseEncoder("r", GenerationPlan(request, 0, 0.0, None), default)
        return encoder.encode(step([3], finished=finish(FinishReason.STOP)))[0].finish.logprobs_mode

    stated = GenerationRequest("r", PROMPT, top_logprobs=2, logprobs_mode=LogprobsMode.RAW)
    unstated = GenerationRequest("r", PROMPT, top_logprobs=2)
    assert finish_mode(stated, LogprobsMode.PROCESSED) == pb.LOGPROBS_MODE_RAW
    assert finish_mode(unstated, LogprobsMode.RAW) == pb.LOGPROBS_MODE_RAW  # the server's default, as it ran
    assert finish_mode(unstated, LogprobsMode.PROCESSED) == pb.LOGPROBS_MODE_PROCESSED
    assert finish_mode(GenerationRequest("r", PROMPT), LogprobsMode.RAW) == pb.LOGPROBS_MODE_UNSPECIFIED  # no logprobs


def test_outputs_of_n_keep_their_index_and_their_own_counts() -> None:
    both = GenerationStep(
        [OutputDelta(0, [1, 2], None, "", None), OutputDelta(2, [3], None, "", finish(FinishReason.LENGTH))], False
    )
    messages = ResponseEncoder("r", plan()).encode(both)
    assert [(m.output_index, list(m.tokens.ids)) for m in messages] == [(0, [1, 2]), (2, [3])]
    assert messages[1].finish.usage.completion_tokens == 1


def test_one_failed_output_of_n_finishes_with_error_and_the_others_go_on() -> None:
    encoder = ResponseEncoder("r", plan())
    failed = encoder.encode(
        GenerationStep(
            [OutputDelta(0, [1], None, "", None), OutputDelta(1, [], None, "", finish(FinishReason.ERROR))], False
        )
    )
    assert failed[1].output_index == 1 and failed[1].finish.reason == pb.FINISH_REASON_ERROR
    assert not failed[0].HasField("finish")
    later = encoder.encode(GenerationStep([OutputDelta(0, [2], None, "", finish(FinishReason.LENGTH))], True))
    assert later[0].finish.reason == pb.FINISH_REASON_LENGTH and later[0].finish.usage.completion_tokens == 2


def test_prompt_logprobs_ride_on_the_first_message() -> None:
    prompt = PromptLogprobs([11, 12], LogprobColumns([-2.0, -0.1], [3, 1], [4, 5, 12, 6], [-0.5, -1.0, -0.1, -3.0]))
    first = ResponseEncoder("r", plan(prompt_logprobs=2)).encode(step([5], prompt_logprobs=prompt))
    tokens = first[0].prompt_logprobs.tokens
    assert list(tokens.ids) == [11, 12] and list(tokens.ranks) == [3, 1] and list(tokens.top_ids) == [4, 5, 12, 6]
    assert list(first[0].tokens.ids) == [5]


def test_minus_infinity_is_reported_as_minus_9999() -> None:
    columns = LogprobColumns([-0.125, -math.inf], [1, 9], [4, 1, 4, 2], [-0.125, -2.0, -0.125, -math.inf])
    messages = ResponseEncoder("r", plan(top_logprobs=2, chunk=1)).encode(step([4, 3], logprobs=columns))
    assert list(messages[1].tokens.logprobs) == [-9999.0] and list(messages[1].tokens.top_logprobs) == [-0.125, -9999.0]
    assert list(messages[0].tokens.top_logprobs) == [-0.125, -2.0]


def test_a_step_in_one_message_matches_the_split_one() -> None:
    # One message per step is the per-token path; the split path is the general one.
    def encoded(chunk: int, top_logprobs: int | None) -> list[pb.GenerateResponse]:
        encoder = ResponseEncoder("r", plan(top_logprobs=top_logprobs, chunk=chunk))
        columns = COLUMNS if top_logprobs else None
        first = step([5], logprobs=columns.slice(0, 1, 3) if columns else None)
        last = step(
            [7, 4],
            logprobs=columns.slice(1, 3, 3) if columns else None,
            finished=finish(FinishReason.STOP, 4, cached=1),
        )
        return encoder.encode(first) + encoder.encode(last)

    for top_logprobs in (3, None):
        whole, split = encoded(0, top_logprobs), encoded(1, top_logprobs)
        assert [len(m.tokens.ids) for m in whole] == [1, 2] and [len(m.tokens.ids) for m in split] == [1, 1, 1]
        merged = pb.TokenBatch()
        for message in split[1:]:
            merged.MergeFrom(message.tokens)
        assert whole[1].tokens == merged and whole[0].tokens == split[0].tokens
        assert whole[1].finish == split[2].finish
        assert (whole[1].finish.stop_token_id, whole[1].finish.usage.completion_tokens) == (4, 3)
        assert not whole[0].HasField("finish")
