"""The inference-validation distance the chain uses (inference-validation.md section 3).

Per position, with O the executor's top-k {token: logprob} and V the validator's:
    m1, m2 = the two smallest logprobs in O (one entry: m2 = m1 - 100); fill = m1 - (m2 - m1)
    d = sum over (t, v) in V of |v - o| / (1e-6 + |v| + |o|) / 2, o = O[t] if t in O else fill
distance = sum_positions d / (max(100, n_positions) * k); -1 when the token sequences differ.
similarity = 1 - distance, and 0 for a NaN, infinite or negative distance (or a negative result);
an inference passes iff similarity > threshold (strict).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from ._validate import require_finite, require_int_at_least

TOKENS_DIFFER = -1.0
DEFAULT_TOP_K = 5  # the network's top_logprobs

Position = tuple[int, Mapping[int, float]]  # (token id, top-k {token id: logprob})


def position_distance(original: Mapping[int, float], validation: Mapping[int, float]) -> float:
    """d of one position: O = the executor's top-k list, V = the validator's."""
    if not original:
        raise ValueError("the executor's top-k list of a position is empty")
    smallest = sorted(original.values())[:2]
    m1 = smallest[0]
    m2 = smallest[1] if len(smallest) > 1 else m1 - 100.0
    fill = m1 - (m2 - m1)  # stands in for a token the executor did not list
    d = 0.0
    for token, v in validation.items():
        o = original.get(token, fill)
        d += abs(v - o) / (1e-6 + abs(v) + abs(o)) / 2
    return d


def sequence_distance(original: Sequence[Position], validation: Sequence[Position], k: int = DEFAULT_TOP_K) -> float:
    """Distance of a replay: -1.0 if the token sequences differ (length or any id), else the mean above."""
    require_int_at_least("k", k, 1)
    if len(original) != len(validation):
        return TOKENS_DIFFER
    if any(o[0] != v[0] for o, v in zip(original, validation)):
        return TOKENS_DIFFER
    total = 0.0
    for (_, o_top), (_, v_top) in zip(original, validation):
        total += position_distance(o_top, v_top)
    return total / (max(100, len(original)) * k)


def similarity(distance: float) -> float:
    """1 - distance; 0.0 for NaN, infinite or negative distances (-1 means the tokens differ)."""
    if math.isnan(distance) or math.isinf(distance) or distance < 0:
        return 0.0
    return max(0.0, 1.0 - distance)


def inference_passes(similarity_value: float, threshold: float) -> bool:
    """similarity > threshold (strict); the chain's threshold for Qwen3-235B is 0.940 today."""
    limit = require_finite("threshold", threshold)
    return similarity_value > limit
