"""Token streams in vLLM's request metrics: a token stream's outputs add to the step statistics
exactly what vLLM's own OutputProcessor adds for a request on its path (the seam
record_token_stream_step), so every stat logger, vLLM's Prometheus metrics included, counts both."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from vllm import SamplingParams
from vllm.sampling_params import RequestOutputKind
from vllm.v1.engine import EngineCoreEvent, EngineCoreEventType, EngineCoreOutput, EngineCoreRequest, FinishReason
from vllm.v1.engine.output_processor import OutputProcessor
from vllm.v1.metrics.stats import IterationStats, PrefillStats

from engine_ext.seams.token_streams import TokenStreams

PROMPT = [9707, 1879, 11, 419]
ARRIVAL = 1000.0
# (engine-core timestamp, frontend iteration timestamp, new tokens, finish) per engine step.
STEPS = [
    (50.30, 1000.40, [7], None),
    (50.35, 1000.45, [8], None),
    (50.42, 1000.52, [9, 10], FinishReason.LENGTH),
]
EVENTS = [EngineCoreEvent(EngineCoreEventType.QUEUED, 50.0), EngineCoreEvent(EngineCoreEventType.SCHEDULED, 50.1)]


CACHED = 2
# The same id on both paths (each test has its own processor): vLLM (0.20 and later) records it per finished request.
REQUEST_ID = "request-1"


def engine_request(request_id: str) -> EngineCoreRequest:
    params = SamplingParams(max_tokens=4, detokenize=False, output_kind=RequestOutputKind.DELTA)
    return EngineCoreRequest(
        request_id=request_id,
        prompt_token_ids=list(PROMPT),
        mm_features=None,
        sampling_params=params,
        pooling_params=None,
        arrival_time=ARRIVAL,
        lora_request=None,
        cache_salt=None,
        data_parallel_rank=None,
        external_req_id=request_id,
    )


def engine_output(request_id: str, tokens: list[int], finish: FinishReason | None, first: bool) -> EngineCoreOutput:
    """One step's output, with the prefix-cache report as vLLM gives it: prefill stats on the output that ends the
    prefill."""
    events = EVENTS if first else None
    prefill = PrefillStats()
    prefill.set(num_prompt_tokens=len(PROMPT), num_local_cached_tokens=CACHED, num_external_cached_tokens=0)
    return EngineCoreOutput(
        request_id, tokens, finish_reason=finish, prefill_stats=prefill if first else None, events=events
    )


def recorded_stats(stats: IterationStats) -> dict:
    # vLLM (0.20 and later) derives num_prompt_tokens (a property) from its prompt-token stats.
    return {**vars(stats), "num_prompt_tokens": stats.num_prompt_tokens}


def step_stats(processor: OutputProcessor, request_id: str) -> list[dict]:
    """What each step's outputs of the request add to a fresh IterationStats, through `processor`."""
    recorded = []
    for index, (engine_time, frontend_time, tokens, finish) in enumerate(STEPS):
        stats = IterationStats()
        stats.iteration_timestamp = frontend_time
        processor.process_outputs([engine_output(request_id, tokens, finish, first=index == 0)], engine_time, stats)
        recorded.append(recorded_stats(stats))
    return recorded


def fake_llm(processor: OutputProcessor, log_stats: bool = True) -> SimpleNamespace:
    async def add_request_async(request: EngineCoreRequest) -> None:
        pass

    return SimpleNamespace(
        output_processor=processor,
        log_stats=log_stats,
        errored=False,
        input_processor=SimpleNamespace(assign_request_id=lambda request: None),
        engine_core=SimpleNamespace(add_request_async=add_request_async),
        _run_output_handler=lambda: None,
    )


def token_stream_stats(request_metrics: bool) -> list[dict]:
    processor = OutputProcessor(None, log_stats=True)
    streams = TokenStreams(fake_llm(processor), request_metrics)
    streams.install()
    stream = asyncio.run(streams.open(REQUEST_ID, engine_request(REQUEST_ID), pad_masked=False))
    recorded = step_stats(processor, REQUEST_ID)
    assert stream.done and not processor.request_states  # it never reached vLLM's own processing
    return recorded


def test_a_token_stream_adds_what_vllm_adds_for_its_own_requests() -> None:
    processor = OutputProcessor(None, log_stats=True)
    processor.add_request(engine_request(REQUEST_ID), None)
    on_vllm_path = step_stats(processor, REQUEST_ID)
    assert on_vllm_path[0]["time_to_first_tokens_iter"] and on_vllm_path[-1]["finished_requests"]

    assert token_stream_stats(request_metrics=True) == on_vllm_path


def test_without_request_metrics_a_token_stream_adds_its_token_counts_only() -> None:
    lean = token_stream_stats(request_metrics=False)
    assert [(step["num_prompt_tokens"], step["num_generation_tokens"]) for step in lean] == [(4, 1), (0, 1), (0, 2)]
    for step in lean:
        assert not (
            step["time_to_first_tokens_iter"] or step["inter_token_latencies_iter"] or step["finished_requests"]
        )
