"""Engine deltas (vLLM RequestOutputs and token-stream TokenDeltas) -> GenerateResponse messages."""

from __future__ import annotations

import grpc
import numpy as np
import pytest
from vllm import SamplingParams
from vllm.logprobs import FlatLogprobs
from vllm.outputs import CompletionOutput, RequestOutput
from vllm.v1.outputs import LogprobsLists

from engine_ext.packed_logprobs import pack
from engine_ext.token_streams import TokenDelta
from gonka.mlnode.v1 import inference_pb2 as pb
from server.errors import ServiceError
from server.response_encoding import ResponseEncoder
from server.translation import GenerationPlan
from tests.unit.test_logprob_columns import POSITIONS, flat_positions

PROMPT = [10, 11, 12]


def plan(top_logprobs: int | None = None, chunk: int = 0, include_text: bool = False, prompt_logprobs: int | None = None) -> GenerationPlan:
    return GenerationPlan(
        prompt_token_ids=PROMPT, sampling_params=SamplingParams(), top_logprobs=top_logprobs, prompt_logprobs=prompt_logprobs,
        max_tokens_per_message=chunk, include_text=include_text, coalesce_seconds=0.0, constraint_field=None,
    )


def delta(token_ids, *, index=0, text="", logprobs=None, finish_reason=None, stop_reason=None, prompt_logprobs=None, cached=0) -> RequestOutput:
    completion = CompletionOutput(index, text, token_ids, None, logprobs, finish_reason=finish_reason, stop_reason=stop_reason)
    return RequestOutput("r", None, PROMPT, prompt_logprobs, [completion], finish_reason is not None, num_cached_tokens=cached)


def test_a_delta_is_split_into_messages_of_at_most_the_asked_size() -> None:
    encoder = ResponseEncoder("r", plan(top_logprobs=3, chunk=2))
    messages = encoder.encode(delta([7, 4, 2], logprobs=flat_positions(POSITIONS, 3)))
    assert [list(m.tokens.ids) for m in messages] == [[7, 4], [2]]
    assert list(messages[1].tokens.top_ids) == [1, 2, 8] and list(messages[1].tokens.ranks) == [2]
    assert all(m.request_id == "r" and m.tokens.top_k == 3 and not m.HasField("finish") for m in messages)


def test_the_last_message_of_an_output_carries_finish_and_usage() -> None:
    encoder = ResponseEncoder("r", plan(include_text=True))
    assert encoder.encode(delta([5, 6], text="ab"))[0].text == "ab"
    last = encoder.encode(delta([9], text="c", finish_reason="stop", stop_reason="<end>", cached=2))
    assert len(last) == 1 and last[0].text == "c"
    finish = last[0].finish
    assert finish.reason == pb.FINISH_REASON_STOP and finish.stop_string == "<end>"
    assert (finish.usage.prompt_tokens, finish.usage.completion_tokens, finish.usage.cached_tokens) == (3, 3, 2)


def test_stop_token_and_length_and_abort_finishes() -> None:
    by_token = ResponseEncoder("r", plan()).encode(delta([3], finish_reason="stop", stop_reason=151645))[0].finish
    assert by_token.WhichOneof("stop_reason") == "stop_token_id" and by_token.stop_token_id == 151645
    eos = ResponseEncoder("r", plan()).encode(delta([3], finish_reason="stop"))[0].finish
    assert eos.WhichOneof("stop_reason") is None
    assert ResponseEncoder("r", plan()).encode(delta([3], finish_reason="length"))[0].finish.reason == pb.FINISH_REASON_LENGTH


def test_a_final_abort_without_tokens_ignores_the_history_vllm_attaches() -> None:
    # vLLM slices delta logprobs with [-len(new_tokens):], so an abort with no new token carries
    # every position's logprobs; none of them belongs to this message.
    encoder = ResponseEncoder("r", plan(top_logprobs=3))
    encoder.encode(delta([7, 4, 2], logprobs=flat_positions(POSITIONS, 3)))
    messages = encoder.encode(delta([], logprobs=flat_positions(POSITIONS, 3), finish_reason="abort"))
    assert len(messages) == 1 and not messages[0].tokens.ids and not messages[0].tokens.logprobs
    assert messages[0].finish.reason == pb.FINISH_REASON_ABORT and messages[0].finish.usage.completion_tokens == 3


def test_outputs_of_n_keep_their_index_and_their_own_counts() -> None:
    encoder = ResponseEncoder("r", plan())
    both = RequestOutput(
        "r", None, PROMPT, None,
        [CompletionOutput(0, "", [1, 2], None, None), CompletionOutput(2, "", [3], None, None, finish_reason="length")],
        False,
    )
    messages = encoder.encode(both)
    assert [(m.output_index, list(m.tokens.ids)) for m in messages] == [(0, [1, 2]), (2, [3])]
    assert messages[1].finish.usage.completion_tokens == 1


def test_prompt_logprobs_ride_on_the_first_message_once() -> None:
    prompt_flat = FlatLogprobs()
    prompt_flat.append(None)  # vLLM leaves position 0 (the unscored first token) empty
    prompt_flat.extend(flat_positions([(11, -2.0, 3, [(4, -0.5), (5, -1.0)]), (12, -0.1, 1, [(12, -0.1), (6, -3.0)])], k=2))
    encoder = ResponseEncoder("r", plan(prompt_logprobs=2))
    first = encoder.encode(delta([5], prompt_logprobs=prompt_flat))
    tokens = first[0].prompt_logprobs.tokens
    assert list(tokens.ids) == [11, 12] and list(tokens.ranks) == [3, 1]
    assert list(tokens.top_ids) == [4, 5, 12, 6]
    assert not encoder.encode(delta([6], prompt_logprobs=prompt_flat))[0].HasField("prompt_logprobs")


def test_an_engine_error_finish_becomes_an_internal_error() -> None:
    with pytest.raises(ServiceError) as caught:
        ResponseEncoder("r", plan()).encode(delta([1], finish_reason="error"))
    assert caught.value.code == grpc.StatusCode.INTERNAL and caught.value.reason_name == "INTERNAL_ERROR"


def test_token_stream_deltas_become_the_same_columns_with_minus_inf_reported() -> None:
    rows = LogprobsLists(
        np.array([[7, 3, 7, 9], [4, 4, 1, 2]], dtype=np.int32),
        np.array([[-0.5, -0.25, -0.5, -1.0], [-0.125, -0.125, -2.0, -np.inf]], dtype=np.float32),
        np.array([2, 1]),
    )
    token_delta = TokenDelta([7, 4], [(2, pack(rows))], "length", None, num_cached_tokens=1, prompt_length=3)
    messages = ResponseEncoder("r", plan(top_logprobs=3, chunk=1)).encode(token_delta)
    assert [list(m.tokens.ids) for m in messages] == [[7], [4]]
    assert list(messages[0].tokens.top_ids) == [3, 7, 9] and list(messages[0].tokens.ranks) == [2]
    assert list(messages[1].tokens.top_logprobs) == [-0.125, -2.0, -9999.0] and list(messages[1].tokens.logprobs) == [-0.125]
    finish = messages[1].finish
    assert finish.reason == pb.FINISH_REASON_LENGTH and not messages[0].HasField("finish")
    assert (finish.usage.prompt_tokens, finish.usage.completion_tokens, finish.usage.cached_tokens) == (3, 2, 1)


def test_a_token_stream_delta_in_one_message_matches_the_split_one() -> None:
    # One message per delta is the per-token path; the split path is the general one.
    rows = LogprobsLists(
        np.array([[7, 3, 7, 9], [4, 4, 1, 2]], dtype=np.int32),
        np.array([[-0.5, -0.25, -0.5, -1.0], [-0.125, -0.125, -2.0, -np.inf]], dtype=np.float32),
        np.array([2, 1]),
    )

    def encoded(chunk: int, top_logprobs: int | None) -> list[pb.GenerateResponse]:
        encoder = ResponseEncoder("r", plan(top_logprobs=top_logprobs, chunk=chunk))
        first = TokenDelta([5], [(1, pack(LogprobsLists(rows[0][:1], rows[1][:1], rows[2][:1])))], None, None, 0, 3)
        last = TokenDelta([7, 4], [(2, pack(rows))], "stop", 4, num_cached_tokens=1, prompt_length=3)
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
