"""Per-request replay state in the worker: enforced tokens and logprobs mode, kept per batch row.

Requests carry both in `SamplingParams.extra_args` (REPLAY_TOKENS_ARG, LOGPROBS_MODE_ARG). vLLM's
public logits-processor interface is the one place that follows a request through the persistent
batch (rows are added, removed, condensed and swapped between steps), so ReplayRows is registered
as a logits processor (entry point `vllm.logits_processors`) that changes no logits: it only keeps
`row -> state`, which the sampler seams (engine_ext.seams) read to force tokens after sampling
and to pick each row's logprobs mode.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import torch
from vllm.sampling_params import SamplingParams
from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor, MoveDirectionality

from engine_ext.generation.both_logprobs_modes import k_of_both_modes_width

# In SamplingParams.extra_args: the tokens to force, position by position (list of ints).
REPLAY_TOKENS_ARG = "gonka_mlnode_enforced_tokens"
# In SamplingParams.extra_args: "raw_logprobs", "processed_logprobs" or BOTH_LOGPROBS_MODES.
LOGPROBS_MODE_ARG = "gonka_mlnode_logprobs_mode"
# Both modes' lists in one (engine_ext.generation.both_logprobs_modes): a replay whose mode nobody states.
BOTH_LOGPROBS_MODES = "raw_and_processed_logprobs"


@dataclass
class RowState:
    # Position m is forced to enforced[m] (enforced[-1] past the end); None: not a replay.
    enforced: list[int] | None
    # vLLM's live list of the request's output tokens: its length is the next position.
    output_token_ids: list[int]
    # Only for requests that asked for logprobs.
    logprobs_mode: str | None
    # The request's `logprobs` (top entries per position), for requests that asked for some.
    num_logprobs: int | None = None

    def next_enforced_token(self) -> int:
        enforced = self.enforced
        assert enforced is not None  # asked of replays only
        position = len(self.output_token_ids)
        return enforced[position] if position < len(enforced) else enforced[-1]


class ReplayRows(LogitsProcessor):
    def __init__(self, vllm_config: Any, device: torch.device, is_pin_memory: bool) -> None:
        self._pin_memory = is_pin_memory
        self._rows: dict[int, RowState] = {}
        # How many rows want logprobs in each mode: the sampler seam's per-step question is O(1).
        self._modes: Counter[str] = Counter()
        self._enforced_rows = 0
        # Steps whose sampler took raw and processed logprobs in one pass (the worker's process report).
        self.mixed_steps = 0

    @classmethod
    def validate_params(cls, sampling_params: SamplingParams) -> None:
        state = _row_state(sampling_params, [])
        if state is not None and state.enforced is not None and not state.enforced:
            raise ValueError("enforced tokens must not be empty")
        if state is not None and state.logprobs_mode == BOTH_LOGPROBS_MODES and (state.num_logprobs or 0) % 2 != 1:
            raise ValueError("a request for both logprobs modes asks for 2k + 1 logprobs")

    def is_argmax_invariant(self) -> bool:
        # It changes no logits; being argmax-invariant keeps vLLM from running it for greedy rows.
        return True

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        return logits

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        if batch_update is None:
            return
        # An added row may reuse an index without a matching removal: it replaces whatever was there.
        for index, params, _prompt, output_token_ids in batch_update.added:
            self._drop(index)
            state = _row_state(params, output_token_ids)
            if state is not None:
                self._put(index, state)
        for index in batch_update.removed:
            self._drop(index)
        for source, target, direction in batch_update.moved:
            moving = self._rows.pop(source, None)
            displaced = self._rows.pop(target, None)
            if moving is not None:
                self._rows[target] = moving
            if displaced is not None and direction == MoveDirectionality.SWAP:
                self._rows[source] = displaced
            elif displaced is not None:  # overwritten by a one-way move: that request left the batch
                self._forget(displaced)

    def logprobs_modes(self) -> set[str]:
        return {mode for mode, count in self._modes.items() if count}

    def needs_both_modes(self) -> bool:
        """Whether this step's sampler must take raw and processed logprobs in one pass."""
        modes = self.logprobs_modes()
        return len(modes) > 1 or BOTH_LOGPROBS_MODES in modes

    def both_modes_rows(self, num_rows: int, device: torch.device) -> list[tuple[int, torch.Tensor]]:
        """The rows that want both modes' lists, grouped by their k: (k, row indices on `device`)."""
        by_k: dict[int, list[int]] = {}
        for index, state in self._rows.items():
            if state.logprobs_mode == BOTH_LOGPROBS_MODES and index < num_rows:
                assert state.num_logprobs is not None  # both modes are asked for with logprobs
                by_k.setdefault(k_of_both_modes_width(state.num_logprobs), []).append(index)
        return [(k, self._on_device(rows, torch.long, device)) for k, rows in by_k.items()]

    def rows_in_mode(self, mode: str, num_rows: int, device: torch.device) -> torch.Tensor:
        """A boolean mask over the batch's rows: those whose logprobs are to be given in `mode`."""
        flags = [False] * num_rows
        for index, state in self._rows.items():
            if state.logprobs_mode == mode and index < num_rows:
                flags[index] = True
        return self._on_device(flags, torch.bool, device)

    def enforce(self, sampled: torch.Tensor) -> torch.Tensor:
        """`sampled` (one token per row) with every replaying row's token replaced by its enforced one."""
        if not self._enforced_rows:
            return sampled
        num_rows = sampled.shape[0]
        rows = [index for index, state in self._rows.items() if state.enforced is not None and index < num_rows]
        if not rows:
            return sampled
        tokens = [self._rows[index].next_enforced_token() for index in rows]
        forced = sampled.clone()
        forced[self._on_device(rows, torch.long, sampled.device)] = self._on_device(
            tokens, sampled.dtype, sampled.device
        )
        return forced

    def _on_device(self, values: list[Any], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        """`values` as a tensor on `device`, copied without waiting for the GPU: a copy from pageable host
        memory synchronizes the stream, which would stall vLLM's asynchronous scheduling at every step (the
        CPU could no longer prepare the next step while the GPU runs this one). Pinned blocks come from
        torch's caching host allocator, which keeps each until its copy has run."""
        return torch.tensor(values, dtype=dtype, pin_memory=self._pin_memory).to(device, non_blocking=True)

    def _put(self, index: int, state: RowState) -> None:
        self._rows[index] = state
        if state.logprobs_mode is not None:
            self._modes[state.logprobs_mode] += 1
        if state.enforced is not None:
            self._enforced_rows += 1

    def _drop(self, index: int) -> None:
        state = self._rows.pop(index, None)
        if state is not None:
            self._forget(state)

    def _forget(self, state: RowState) -> None:
        if state.logprobs_mode is not None:
            self._modes[state.logprobs_mode] -= 1
        if state.enforced is not None:
            self._enforced_rows -= 1


def _row_state(params: SamplingParams, output_token_ids: list[int]) -> RowState | None:
    extra = params.extra_args or {}
    enforced = extra.get(REPLAY_TOKENS_ARG)
    mode = extra.get(LOGPROBS_MODE_ARG) if params.logprobs is not None else None
    if enforced is None and mode is None:
        return None
    return RowState(
        None if enforced is None else [int(token) for token in enforced], output_token_ids, mode, params.logprobs
    )


def find_replay_rows(sampling_metadata: Any) -> ReplayRows | None:
    """The batch's ReplayRows."""
    return replay_rows_of(sampling_metadata.logitsprocs)


def replay_rows_of(logitsprocs: Any) -> ReplayRows | None:
    """The ReplayRows among a persistent batch's logits processors (vLLM's LogitsProcessors, shared by
    the input batch and each step's sampling metadata, keeps argmax-invariant ones in their own list)."""
    for processor in logitsprocs.argmax_invariant:
        if isinstance(processor, ReplayRows):
            return processor
    return None
