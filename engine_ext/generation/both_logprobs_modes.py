"""One replay, both logprobs modes: how a request that asks for raw and processed logprobs at once
(GenerationRequest.both_logprobs_modes) carries them through vLLM's single logprobs list.

A validation replay whose mode nobody states computes both modes' lists in the same engine pass
(the per-request logprobs-mode seam already takes the raw log_softmax beside the processed one in a
mixed batch). vLLM's output has one list per position, [chosen token, top-1 .. top-n], n being the
request's `logprobs`; such a request asks for n = 2k + 1 and the seam fills it as

    [chosen (processed), processed top-1 .. top-k, chosen (raw), raw top-1 .. top-k]

so that every path vLLM's outputs take (the engine core's slicing, token streams' packing, the
frontend's flat logprobs) carries it unchanged as long as no path merges a position's entries by
token id (see MlnodeEngine.generate). The chosen token's rank is the processed one.
"""

from __future__ import annotations

from engine_ext.generation.logprob_padding import pad_masked_entries
from engine_ext.generation.outputs import LogprobColumns


def both_modes_width(k: int) -> int:
    """The `logprobs` a request asks vLLM for to carry both modes' top-k lists."""
    return 2 * k + 1


def k_of_both_modes_width(width: int) -> int:
    """The top-k of each mode, from the request's `logprobs` (the inverse of both_modes_width)."""
    return (width - 1) // 2


def split_both_modes(columns: LogprobColumns, k: int) -> tuple[LogprobColumns, LogprobColumns]:
    """(processed, raw) columns from the 2k+1-wide ones; the processed lists padded as processed lists
    are (engine_ext.generation.logprob_padding); the raw columns have no ranks."""
    width = both_modes_width(k)
    processed = LogprobColumns(logprobs=columns.logprobs, ranks=columns.ranks)
    raw = LogprobColumns()
    for position in range(len(columns.logprobs)):
        start = position * width
        processed.top_ids.extend(columns.top_ids[start : start + k])
        processed.top_logprobs.extend(columns.top_logprobs[start : start + k])
        raw.logprobs.append(columns.top_logprobs[start + k])
        raw.top_ids.extend(columns.top_ids[start + k + 1 : start + width])
        raw.top_logprobs.extend(columns.top_logprobs[start + k + 1 : start + width])
    return pad_masked_entries(processed, k), raw
