"""A position's top-k list as the network's OpenAI-style servers build it (inference-validation.md 4).

Start with the sampled (or enforced) token and its logprob, then add the model's top-1, top-2, ...,
skipping a token already present, until k entries: when the sampled token is outside the model's top-k
the list is {sampled, top-1 .. top-(k-1)}, otherwise {top-1 .. top-k}. -inf is reported as -9999.0.
Executor and validator build it the same way, so the validator's distance equals the chain's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ._validate import require_int, require_int_at_least

# -inf is not JSON: the network reports a masked token's logprob as this (the only place it is named).
MASKED_LOGPROB = -9999.0


def reported_logprob(logprob: float) -> float:
    """The value the chain's lists and the gRPC responses carry: -inf (a masked token) becomes -9999.0."""
    return MASKED_LOGPROB if math.isinf(logprob) and logprob < 0 else float(logprob)


def floored_logprob(logprob: float) -> float:
    """The value vLLM's OpenAI server (and so the HTTP API) reports: anything below -9999.0 becomes -9999.0,
    -inf and also a finite logprob a low temperature pushed below it, which reported_logprob keeps."""
    return max(logprob, MASKED_LOGPROB)


def build_topk_list(
    sampled_token: int, sampled_logprob: float, model_topk: Sequence[tuple[int, float]], k: int
) -> list[tuple[int, float]]:
    """k (token id, logprob) entries: the sampled token first, then the model's ranks in order.

    model_topk is the model's own top list, best first (at least k entries, or k-1 when the sampled
    token is not among them).
    """
    require_int_at_least("k", k, 1)
    require_int("sampled_token", sampled_token)
    entries = [(sampled_token, reported_logprob(sampled_logprob))]
    present = {sampled_token}
    for token, logprob in model_topk:
        if len(entries) == k:
            break
        if token in present:
            continue
        present.add(token)
        entries.append((token, reported_logprob(logprob)))
    if len(entries) < k:
        raise ValueError(
            f"model top list of {len(model_topk)} entries is too short to build a top-{k} list "
            f"around sampled token {sampled_token}"
        )
    return entries
