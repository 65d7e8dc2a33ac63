"""Each position's top list as the chain records it (inference-validation.md 4), from a step's columns."""

from __future__ import annotations

from engine_ext.consensus.topk_list import build_topk_list
from engine_ext.generation.outputs import LogprobColumns


def chain_top_lists(token_ids: list[int], columns: LogprobColumns, k: int) -> list[list[tuple[int, float]]]:
    """Per position: the sampled token first, then the model's best others, k entries, -inf as -9999 (consensus.topk_list.MASKED_LOGPROB)."""
    lists = []
    for position, token in enumerate(token_ids):
        start = position * k
        model_top = list(zip(columns.top_ids[start : start + k], columns.top_logprobs[start : start + k]))
        lists.append(build_topk_list(token, columns.logprobs[position], model_top, k))
    return lists
