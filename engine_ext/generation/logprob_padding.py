"""Processed-mode top-k lists: masked entries take the lowest token ids (inference-validation.md 2).

In processed mode the sampling masks (top-k, top-p, min-p, a grammar) leave -inf on most of the
vocabulary; when fewer than k tokens survive, torch's top-k fills the list with -inf entries whose
ids are whatever its sort left there. The network's executors report those places as the lowest
token ids (0, 1, 2, ...) at -9999.0, and validators detect the mode from exactly that padding, so
the ids are made so here.
"""

from __future__ import annotations

import math

from engine_ext.generation.outputs import LogprobColumns


def pad_masked_entries(columns: LogprobColumns, k: int) -> LogprobColumns:
    """In place: per position, each -inf entry's id becomes the lowest id not already in the list."""
    if k == 0 or -math.inf not in columns.top_logprobs:
        return columns
    ids, logprobs = columns.top_ids, columns.top_logprobs
    for start in range(0, len(ids), k):
        end = start + k
        masked = [i for i in range(start, end) if logprobs[i] == -math.inf]
        if not masked:
            continue
        survivors = {ids[i] for i in range(start, end) if logprobs[i] != -math.inf}
        lowest = (token for token in range(k + len(survivors)) if token not in survivors)
        for i in masked:
            ids[i] = next(lowest)
    return columns
