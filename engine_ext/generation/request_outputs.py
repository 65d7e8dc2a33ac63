"""vLLM's RequestOutput (the generate() path) -> the project's GenerationStep.

Logprobs arrive as vLLM's FlatLogprobs (the server asks for flat_logprobs=True), which store each
position as [chosen token, top-1, ..., top-k] with ranks. When a slow consumer makes vLLM merge
two deltas, the merged positions pass through a dict, which drops the chosen token's duplicate
when it is itself in the top-k; both layouts are read here.
"""

from __future__ import annotations

from typing import Any, cast

from vllm.logprobs import FlatLogprobs
from vllm.outputs import CompletionOutput, RequestOutput

from engine_ext.generation.logprob_padding import pad_masked_entries
from engine_ext.generation.outputs import (
    Finish,
    FinishReason,
    GenerationStep,
    LogprobColumns,
    OutputDelta,
    PromptLogprobs,
)


class RequestOutputReader:
    """One request's RequestOutputs as GenerationSteps (prompt logprobs only on the first step)."""

    def __init__(
        self, top_logprobs: int | None, prompt_logprobs: int | None, include_text: bool, pad_masked: bool = False
    ) -> None:
        self._top_logprobs = top_logprobs
        # Processed-mode logprobs: masked top-k entries take the lowest ids (engine_ext.generation.logprob_padding).
        self._pad_masked = pad_masked
        self._prompt_logprobs = prompt_logprobs
        self._include_text = include_text
        self._prompt_logprobs_sent = False

    def step(self, output: RequestOutput) -> GenerationStep:
        prompt_tokens = len(output.prompt_token_ids or ())
        cached_tokens = output.num_cached_tokens or 0
        outputs = [self._output_delta(completion, prompt_tokens, cached_tokens) for completion in output.outputs]
        step = GenerationStep(outputs, output.finished)
        if self._prompt_logprobs is not None and not self._prompt_logprobs_sent and output.prompt_logprobs:
            # Position 0 of vLLM's prompt logprobs is the unscored first token.
            assert output.prompt_token_ids is not None  # a prompt of token ids, whose logprobs are here
            scored_ids = list(output.prompt_token_ids[1:])
            columns = logprob_columns(as_flat(output.prompt_logprobs), scored_ids, 1, self._prompt_logprobs)
            step.prompt_logprobs = PromptLogprobs(scored_ids, columns)
            self._prompt_logprobs_sent = True
        return step

    def _output_delta(self, completion: CompletionOutput, prompt_tokens: int, cached_tokens: int) -> OutputDelta:
        token_ids = list(completion.token_ids)
        k = self._top_logprobs
        columns = (
            logprob_columns(as_flat(completion.logprobs), token_ids, 0, k) if k is not None and token_ids else None
        )
        if columns is not None and k is not None and self._pad_masked:
            pad_masked_entries(columns, k)
        finish = None
        if completion.finish_reason is not None:
            finish = Finish(
                finish_reason(completion.finish_reason), completion.stop_reason, prompt_tokens, cached_tokens
            )
        return OutputDelta(completion.index, token_ids, columns, completion.text if self._include_text else "", finish)


def finish_reason(name: Any) -> FinishReason:
    """vLLM's finish reason (its string form: stop, length, abort, error) as the project's."""
    return FinishReason(str(name))


def as_flat(logprobs: object) -> FlatLogprobs:
    """vLLM's logprobs of a request that asked for flat ones (engine_ext.generation.generation_request: flat_logprobs=True)."""
    return cast(FlatLogprobs, logprobs)


def ranks_of(ranks: list[int | None]) -> list[int]:
    """FlatLogprobs' ranks: every one is set (vLLM's logprobs processor fills a rank per entry; only a Logprob built by
    hand has none)."""
    return cast(list[int], ranks)


def logprob_columns(flat: FlatLogprobs, chosen_ids: list[int], first_position: int, k: int) -> LogprobColumns:
    """Columns for positions first_position .. first_position+len(chosen_ids)-1 of `flat`."""
    count = len(chosen_ids)
    if count == 0:
        return LogprobColumns()
    width = k + 1
    lo = flat.start_indices[first_position]
    hi = flat.end_indices[first_position + count - 1]
    if hi - lo == count * width:
        return _regular_columns(flat, lo, hi, width)
    return _merged_columns(flat, chosen_ids, first_position, k)


def _regular_columns(flat: FlatLogprobs, lo: int, hi: int, width: int) -> LogprobColumns:
    # Every position holds exactly [chosen, top-1..top-k]: strided slices, all in C.
    logprobs = flat.logprobs[lo:hi]
    columns = LogprobColumns(logprobs=logprobs[0::width], ranks=ranks_of(flat.ranks[lo:hi:width]))
    if width > 1:
        top_ids = flat.token_ids[lo:hi]
        del top_ids[0::width]
        del logprobs[0::width]
        columns.top_ids = top_ids
        columns.top_logprobs = logprobs
    return columns


def _merged_columns(flat: FlatLogprobs, chosen_ids: list[int], first_position: int, k: int) -> LogprobColumns:
    columns = LogprobColumns()
    for offset, chosen in enumerate(chosen_ids):
        position = first_position + offset
        lo, hi = flat.start_indices[position], flat.end_indices[position]
        entries = list(zip(flat.token_ids[lo:hi], flat.logprobs[lo:hi], ranks_of(flat.ranks[lo:hi])))
        chosen_entry = next(entry for entry in entries if entry[0] == chosen)
        columns.logprobs.append(chosen_entry[1])
        columns.ranks.append(chosen_entry[2])
        # k+1 entries: [chosen, top-1..top-k] kept their order; k entries: the chosen token was one
        # of the top-k and sits first, so the rank restores the order.
        top = entries[1:] if len(entries) == k + 1 else sorted(entries, key=lambda entry: entry[2])
        columns.top_ids.extend(entry[0] for entry in top[:k])
        columns.top_logprobs.extend(entry[1] for entry in top[:k])
    return columns
