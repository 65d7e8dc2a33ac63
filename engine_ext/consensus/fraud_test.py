"""One-sided binomial fraud test of a PoC validation (poc-v2.md section 7).

p_value = P[X >= n_mismatch] with X ~ Binomial(n_total, p_mismatch); fraud iff p_value < fraud_threshold.
n_total = 0 gives (1.0, False). The caller's thresholds always win; the network's values for
Qwen3-235B are dist_threshold 0.2, p_mismatch 0.1, fraud threshold 0.05.
"""

from __future__ import annotations

from typing import NamedTuple

from scipy.stats import binom

from ._validate import require_finite, require_int_at_least


class FraudTestResult(NamedTuple):
    p_value: float
    fraud_detected: bool


def fraud_test(n_mismatch: int, n_total: int, p_mismatch: float, fraud_threshold: float) -> FraudTestResult:
    """P[X >= n_mismatch], X ~ Binomial(n_total, p_mismatch), and whether it is below fraud_threshold."""
    require_int_at_least("n_mismatch", n_mismatch, 0)
    require_int_at_least("n_total", n_total, 0)
    if n_mismatch > n_total:
        raise ValueError(f"n_mismatch ({n_mismatch}) cannot exceed n_total ({n_total})")
    p = require_finite("p_mismatch", p_mismatch)
    if not 0.0 < p < 1.0:
        raise ValueError(f"p_mismatch must be in (0, 1), got {p_mismatch}")
    threshold = require_finite("fraud_threshold", fraud_threshold)
    if not 0.0 <= threshold <= 1.0:
        raise ValueError(f"fraud_threshold is a p-value threshold in [0, 1], got {fraud_threshold}")
    if n_total == 0:
        return FraudTestResult(1.0, False)
    # sf(m - 1) = P[X > m - 1] = P[X >= m], computed directly (no 1 - cdf cancellation for tiny tails).
    p_value = float(binom.sf(n_mismatch - 1, n_total, p))
    return FraudTestResult(p_value, p_value < threshold)
