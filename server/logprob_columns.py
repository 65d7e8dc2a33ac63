"""Engine logprobs -> the columnar arrays of a TokenBatch.

Two sources: the engine's packed logprobs (token streams), and vLLM's flat logprobs
(flat_logprobs=True), which store each position as [chosen token, top-1, ..., top-k] with ranks.
When a slow consumer makes vLLM merge two deltas, the merged positions pass through a dict, which
drops the chosen token's duplicate when it is itself in the top-k; both layouts are handled.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from vllm.logprobs import FlatLogprobs

from engine_ext.token_streams import TokenDelta

NEG_INF = -math.inf
# The network's convention (OpenAI-compatible servers) for a logprob of -inf.
REPORTED_NEG_INF = -9999.0


@dataclass
class LogprobColumns:
    logprobs: list[float] = field(default_factory=list)
    ranks: list[int] = field(default_factory=list)
    top_ids: list[int] = field(default_factory=list)
    top_logprobs: list[float] = field(default_factory=list)

    def slice(self, start: int, end: int, k: int) -> "LogprobColumns":
        """Positions start..end-1 (itself when that is every position: no copies on the common path)."""
        if start == 0 and end >= len(self.logprobs):
            return self
        return LogprobColumns(
            self.logprobs[start:end], self.ranks[start:end], self.top_ids[start * k : end * k], self.top_logprobs[start * k : end * k]
        )


def token_delta_columns(delta: TokenDelta, k: int) -> LogprobColumns:
    logprobs, ranks, top_ids, top_logprobs = delta.logprob_columns(k)
    return LogprobColumns(_report_neg_inf(logprobs), ranks, top_ids, _report_neg_inf(top_logprobs))


def logprob_columns(flat: FlatLogprobs, chosen_ids: list[int], first_position: int, k: int) -> LogprobColumns:
    """Columns for positions first_position .. first_position+len(chosen_ids)-1 of `flat`."""
    count = len(chosen_ids)
    if count == 0:
        return LogprobColumns()
    width = k + 1
    lo = flat.start_indices[first_position]
    hi = flat.end_indices[first_position + count - 1]
    if hi - lo == count * width:
        columns = _regular_columns(flat, lo, hi, width)
    else:
        columns = _merged_columns(flat, chosen_ids, first_position, k)
    columns.logprobs = _report_neg_inf(columns.logprobs)
    columns.top_logprobs = _report_neg_inf(columns.top_logprobs)
    return columns


def _regular_columns(flat: FlatLogprobs, lo: int, hi: int, width: int) -> LogprobColumns:
    # Every position holds exactly [chosen, top-1..top-k]: strided slices, all in C.
    logprobs = flat.logprobs[lo:hi]
    columns = LogprobColumns(logprobs=logprobs[0::width], ranks=flat.ranks[lo:hi:width])
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
        entries = list(zip(flat.token_ids[lo:hi], flat.logprobs[lo:hi], flat.ranks[lo:hi]))
        chosen_entry = next(entry for entry in entries if entry[0] == chosen)
        columns.logprobs.append(chosen_entry[1])
        columns.ranks.append(chosen_entry[2])
        # k+1 entries: [chosen, top-1..top-k] kept their order; k entries: the chosen token was one
        # of the top-k and sits first, so the rank restores the order.
        top = entries[1:] if len(entries) == k + 1 else sorted(entries, key=lambda entry: entry[2])
        columns.top_ids.extend(entry[0] for entry in top[:k])
        columns.top_logprobs.extend(entry[1] for entry in top[:k])
    return columns


def _report_neg_inf(values: list[float]) -> list[float]:
    if NEG_INF not in values:
        return values
    return [REPORTED_NEG_INF if value == NEG_INF else value for value in values]
