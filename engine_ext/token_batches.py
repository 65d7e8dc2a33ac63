"""Token-batch outputs: a lean frontend path for requests that want token ids and logprobs only.

vLLM's frontend turns every engine step of every request into a RequestOutput holding a
CompletionOutput and, with logprobs, a per-position Python structure built token by token. A request
that wants no text, one output and no prompt logprobs (what the network's validation traffic asks
for) needs none of that: its deltas can carry the token ids and the engine's own logprob arrays
as they arrive. The seam `token_batch_outputs` (seams/vllm_0_15.py) routes flagged requests here;
everything else about them (scheduling, aborts, stats, errors) stays vLLM's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from vllm.outputs import RequestOutput
from vllm.sampling_params import RequestOutputKind, SamplingParams
from vllm.v1.engine import EngineCoreOutput
from vllm.v1.outputs import LogprobsLists

TOKEN_BATCHES_ARG = "gonka_mlnode_token_batches"


def token_batches_possible(params: SamplingParams) -> bool:
    """Requests this path can serve exactly: streamed, one output, no text, no prompt logprobs."""
    return (
        params.output_kind == RequestOutputKind.DELTA
        and params.n == 1
        and not params.detokenize
        and params.prompt_logprobs is None
    )


def request_token_batches(params: SamplingParams) -> None:
    """Flags `params` for the token-batch path (a no-op for requests it cannot serve)."""
    if token_batches_possible(params):
        params.extra_args = {**(params.extra_args or {}), TOKEN_BATCHES_ARG: True}


def wants_token_batches(params: SamplingParams | None) -> bool:
    return params is not None and bool((params.extra_args or {}).get(TOKEN_BATCHES_ARG)) and token_batches_possible(params)


class PendingLogprobs:
    """Stands in for vLLM's LogprobsProcessor: keeps the engine's arrays instead of Python objects."""

    def __init__(self) -> None:
        self._arrays: list[LogprobsLists] = []

    def update_from_output(self, output: EngineCoreOutput) -> None:
        if output.new_logprobs is not None:
            self._arrays.append(output.new_logprobs)

    def take(self) -> list[LogprobsLists]:
        arrays, self._arrays = self._arrays, []
        return arrays


@dataclass
class LogprobArrays:
    """Per position: the chosen token's logprob and rank; its top-k ids and logprobs as [n, k]."""

    logprobs: np.ndarray
    ranks: np.ndarray
    top_ids: np.ndarray
    top_logprobs: np.ndarray


class TokenDelta(RequestOutput):
    """The tokens one request produced since its last delta (several deltas, merged, when the
    consumer fell behind). A RequestOutput subclass because vLLM's generate() and output
    collector deal in RequestOutputs; RequestOutput's own fields are not built."""

    def __init__(
        self,
        request_id: str,
        token_ids: list[int],
        logprobs: list[LogprobsLists],
        finish_reason: str | None,
        stop_reason: int | str | None,
        num_cached_tokens: int,
        prompt_length: int,
    ) -> None:  # noqa: D107 - RequestOutput.__init__ is deliberately not called
        self.request_id = request_id
        self.token_ids = token_ids
        self.logprob_lists = logprobs
        self.finish_reason = finish_reason
        self.stop_reason = stop_reason
        self.num_cached_tokens = num_cached_tokens
        self.prompt_length = prompt_length
        self.finished = finish_reason is not None

    def add(self, next_output: RequestOutput, aggregate: bool) -> None:
        assert isinstance(next_output, TokenDelta)
        self.token_ids.extend(next_output.token_ids)
        self.logprob_lists.extend(next_output.logprob_lists)
        self.finish_reason = next_output.finish_reason
        self.stop_reason = next_output.stop_reason
        self.num_cached_tokens = next_output.num_cached_tokens
        self.finished |= next_output.finished

    def logprob_arrays(self, k: int) -> LogprobArrays:
        """The positions' logprobs; the engine pads top-k to the batch's largest k, so cut to `k`."""
        if len(self.logprob_lists) == 1:
            ids, values, ranks, _ = self.logprob_lists[0]
        else:
            ids = np.concatenate([part.logprob_token_ids for part in self.logprob_lists])
            values = np.concatenate([part.logprobs for part in self.logprob_lists])
            ranks = np.concatenate([part.sampled_token_ranks for part in self.logprob_lists])
        return LogprobArrays(values[:, 0], ranks, ids[:, 1 : k + 1], values[:, 1 : k + 1])
