"""Which logprobs mode an executor used, when a replay does not say (inference-validation.md 2).

processed_logprobs lists are padded with the lowest token ids (0, 1, 2, ...) at -9999.0 where fewer
than k tokens survive sampling masks; raw lists almost never contain ids below 4. Over all positions
of the executor's top-k lists: fewer than 10 ids -> unknown; low/total > 0.10 -> processed, else raw.
Priority: the request's explicit mode > detection > the default (processed, the network's).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

_MIN_IDS = 10
_LOW_ID_LIMIT = 4
_LOW_SHARE = 0.10


class LogprobsMode(str, enum.Enum):
    RAW = "raw_logprobs"
    PROCESSED = "processed_logprobs"


DEFAULT_MODE = LogprobsMode.PROCESSED


def detect_logprobs_mode(top_token_ids: Iterable[Iterable[int]]) -> LogprobsMode | None:
    """Classify from the executor's per-position top-k token ids; None when there are fewer than 10 ids.

    A position may be given as its ids or as its {token id: logprob} mapping (iterating gives the ids).
    """
    total = 0
    low = 0
    for position in top_token_ids:
        for token in position:
            total += 1
            low += int(token) < _LOW_ID_LIMIT
    if total < _MIN_IDS:
        return None
    return LogprobsMode.PROCESSED if low / total > _LOW_SHARE else LogprobsMode.RAW


def resolve_logprobs_mode(
    explicit: str | LogprobsMode | None,
    top_token_ids: Iterable[Iterable[int]],
    default: LogprobsMode = DEFAULT_MODE,
) -> LogprobsMode:
    """The mode a replay uses: the explicit one, else the detected one, else the default."""
    if explicit is not None:
        try:
            return LogprobsMode(explicit)
        except ValueError as exc:
            valid = ", ".join(m.value for m in LogprobsMode)
            raise ValueError(f"unknown logprobs mode {explicit!r}; expected one of {valid}") from exc
    detected = detect_logprobs_mode(top_token_ids)
    return default if detected is None else detected
