"""Token streams and packed logprobs: what the output handler appends is what the consumer takes."""

from __future__ import annotations

import asyncio
import math

import numpy as np
import pytest
from vllm import SamplingParams
from vllm.sampling_params import RequestOutputKind
from vllm.v1.engine import EngineCoreOutput, FinishReason
from vllm.v1.engine.exceptions import EngineDeadError
from vllm.v1.outputs import LogprobsLists

from engine_ext.generation.outputs import FinishReason as Finished
from engine_ext.generation.outputs import LogprobColumns
from engine_ext.generation.packed_logprobs import (
    PACKED_LOGPROBS_KEY,
    pack,
    request_packed_logprobs,
    unpack,
    wants_packed_logprobs,
)
from engine_ext.seams.token_streams import TokenStream, token_stream_possible


def logprob_lists(rows: list[tuple[list[int], list[float], int]]) -> LogprobsLists:
    """Rows of (chosen id + top ids, their logprobs, chosen rank), as the sampler emits them."""
    return LogprobsLists(
        np.array([ids for ids, _, _ in rows], dtype=np.int32),
        np.array([values for _, values, _ in rows], dtype=np.float32),
        np.array([rank for _, _, rank in rows], dtype=np.int64),
    )


ROW_A = ([7, 3, 7, 9], [-0.5, -0.25, -0.5, -1.0], 2)
ROW_B = ([4, 4, 1, 2], [-0.125, -0.125, -2.0, -math.inf], 1)
ROW_C = ([8, 5, 8], [-3.0, -0.75, -3.0], 2)  # a later step whose batch asked for at most k = 2


def test_packing_round_trips_every_column_and_keeps_the_first_k() -> None:
    parts = [(2, pack(logprob_lists([ROW_A, ROW_B]))), (1, pack(logprob_lists([ROW_C])))]
    logprobs, ranks, top_ids, top_logprobs = unpack(parts, 2)
    assert logprobs == [-0.5, -0.125, -3.0] and ranks == [2, 1, 2]
    assert top_ids == [3, 7, 4, 1, 5, 8]
    assert top_logprobs == [-0.25, -0.5, -0.125, -2.0, -0.75, -3.0]
    # k = 3 reaches the -inf of a forbidden token; the engine's values pass through unchanged.
    assert unpack(parts[:1], 3)[3] == [-0.25, -0.5, -1.0, -0.125, -2.0, -math.inf]
    assert unpack(parts, 0)[2:] == ([], [])


def test_only_requests_that_asked_and_want_logprobs_are_packed() -> None:
    params = SamplingParams(logprobs=3)
    assert not wants_packed_logprobs(params)
    request_packed_logprobs(params)
    assert wants_packed_logprobs(params) and wants_packed_logprobs(params.clone())
    without_logprobs = SamplingParams()
    request_packed_logprobs(without_logprobs)
    assert not wants_packed_logprobs(without_logprobs) and not wants_packed_logprobs(None)


def test_token_streams_serve_streamed_text_free_single_outputs_only() -> None:
    def params(**overrides) -> SamplingParams:
        options = dict(detokenize=False, output_kind=RequestOutputKind.DELTA)
        return SamplingParams(**{**options, **overrides})

    assert token_stream_possible(params()) and token_stream_possible(params(logprobs=5))
    assert not token_stream_possible(params(detokenize=True))
    assert not token_stream_possible(params(n=2))
    assert not token_stream_possible(params(prompt_logprobs=1))
    assert not token_stream_possible(params(output_kind=RequestOutputKind.FINAL_ONLY))
    assert not token_stream_possible(params(stop=["x"], detokenize=True))


def output(
    token_ids: list[int], rows=None, *, packed: bool = True, finish: FinishReason | None = None, stop=None
) -> EngineCoreOutput:
    lists = logprob_lists(rows) if rows else None
    return EngineCoreOutput(
        request_id="r-1",
        new_token_ids=token_ids,
        new_logprobs=None if packed else lists,
        kv_transfer_params={PACKED_LOGPROBS_KEY: pack(lists)} if packed and lists else None,
        finish_reason=finish,
        stop_reason=stop,
    )


def new_stream(top_logprobs: int | None = 2) -> TokenStream:
    return TokenStream("r-1-abcd", "r-1", prompt_length=40, top_logprobs=top_logprobs)


def take(stream: TokenStream):
    """The stream's next step, as its one output's delta."""
    step = asyncio.run(stream.next_step(asyncio.new_event_loop()))
    assert len(step.outputs) == 1 and step.finished == (step.outputs[0].finish is not None)
    return step.outputs[0]


def test_steps_the_consumer_missed_arrive_merged_in_order() -> None:
    stream = new_stream()
    stream.append(output([7, 4], [ROW_A, ROW_B]))
    stream.append(output([8], [ROW_C]))
    delta = take(stream)
    assert delta.token_ids == [7, 4, 8] and delta.finish is None
    assert delta.logprobs == LogprobColumns(
        *unpack([(2, pack(logprob_lists([ROW_A, ROW_B]))), (1, pack(logprob_lists([ROW_C])))], 2)
    )


def test_unpacked_engine_logprobs_give_the_same_columns() -> None:
    packed, plain = new_stream(3), new_stream(3)
    for stream, is_packed in ((packed, True), (plain, False)):
        stream.append(output([7, 4], [ROW_A, ROW_B], packed=is_packed))
    assert take(plain).logprobs == take(packed).logprobs


def test_a_stream_without_logprobs_has_no_columns() -> None:
    stream = new_stream(top_logprobs=None)
    stream.append(output([7, 4]))
    assert take(stream).logprobs is None


def test_the_finish_travels_with_the_last_tokens_and_ends_the_stream() -> None:
    stream = new_stream()
    stream.num_cached_tokens = 16  # as TokenStreams sets it from the engine core's report
    stream.append(output([7], [ROW_A]))
    stream.append(output([151645], [ROW_B], finish=FinishReason.STOP, stop=151645))
    assert stream.done
    delta = take(stream)
    assert delta.token_ids == [7, 151645] and (delta.finish.reason, delta.finish.stop_reason) == (Finished.STOP, 151645)
    assert (delta.finish.prompt_tokens, delta.finish.cached_tokens) == (40, 16)
    stream.abort()  # too late: the stream already finished
    assert take(stream).finish.reason == Finished.STOP


def test_an_abort_ends_the_stream_after_the_tokens_it_already_has() -> None:
    stream = new_stream()
    stream.append(output([7]))
    stream.abort()
    delta = take(stream)
    assert delta.token_ids == [7] and delta.finish.reason == Finished.ABORT and delta.finish.stop_reason is None


def test_an_engine_failure_reaches_the_waiting_consumer() -> None:
    async def scenario() -> None:
        stream = new_stream()
        waiting = asyncio.create_task(stream.next_step(asyncio.get_running_loop()))
        await asyncio.sleep(0)
        assert not waiting.done()
        stream.fail(EngineDeadError())
        with pytest.raises(EngineDeadError):
            await waiting

    asyncio.run(scenario())


def test_a_waiting_consumer_wakes_on_the_next_step() -> None:
    async def scenario() -> list[int]:
        stream = new_stream()
        waiting = asyncio.create_task(stream.next_step(asyncio.get_running_loop()))
        await asyncio.sleep(0)
        stream.append(output([5]))
        return (await waiting).outputs[0].token_ids

    assert asyncio.run(scenario()) == [5]


def test_the_token_stream_seam_is_installed_once_and_reported_like_every_seam() -> None:
    from vllm.v1.engine.output_processor import OutputProcessor

    from engine_ext.seams import expected_seams, install_seams, installed_seams
    from engine_ext.seams.common import TOKEN_STREAMS, marks_on

    install_seams(is_cpu_platform=True)
    install_seams(is_cpu_platform=True)  # vLLM may load plugins more than once per process
    assert installed_seams().count(TOKEN_STREAMS) == 1
    assert all(TOKEN_STREAMS in expected_seams(is_cpu_platform=cpu) for cpu in (True, False))
    assert marks_on([OutputProcessor.propagate_error]) == [TOKEN_STREAMS]  # the failure path is wrapped too
