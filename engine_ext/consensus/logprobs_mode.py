"""Which logprobs mode an executor used (inference-validation.md 2), resolved in one place.

Priority: the mode the validation item states > the mode the original request stated > what the
replay itself shows > the spec's padding count > the default (processed, the network's).

The replay: a replay whose mode nobody states computes both modes' lists in one pass, and the
executor's record is compared with each (the chain's distance). When one mode's distance is at most
REPLAY_DECISIVE_RATIO of the other's, the record was made in that mode (REPLAY). When the two differ
by less, the replay cannot tell, and the record is judged in the mode it matches worse (STRICTER): an
ambiguity never helps a record pass, so a record that fails in the mode it was made in fails unstated
too, and an honest one loses nothing (its two modes are then near-identical). Only when the two
distances are equal (identical lists: greedy, or temperature 1 with nothing masked) or the replay
computed one mode does the spec's padding count decide: processed_logprobs lists are padded with the
lowest token ids (0, 1, 2, ...) at -9999.0 where fewer than k tokens survive sampling masks, raw lists
almost never contain ids below 4. Over all positions of the executor's top-k lists: fewer than 10 ids
-> unknown (the default); low/total > 0.10 -> processed, else raw.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

_MIN_IDS = 10
_LOW_ID_LIMIT = 4
_LOW_SHARE = 0.10
# A record is taken as made in a mode when its distance to that mode's replay is at most this share of
# its distance to the other mode's. Honest records on one engine sit at ~0 against their own mode; a
# record tampered by scaling its logprobs sits at comparable distances from both (docs/validation.md).
REPLAY_DECISIVE_RATIO = 0.5


class LogprobsMode(str, enum.Enum):
    RAW = "raw_logprobs"
    PROCESSED = "processed_logprobs"


class ModeSource(str, enum.Enum):
    """Where a resolved mode came from, in priority order."""

    ITEM = "item"  # the validation item states it
    REQUEST = "request"  # the original request states it
    REPLAY = "replay"  # the replay's two lists: the record matches one clearly better
    STRICTER = "stricter"  # the replay's two lists, not clearly apart: the one the record matches worse
    PADDING = "padding"  # the spec's count of padding ids in the executor's lists
    DEFAULT = "default"  # nothing else decided


@dataclass(frozen=True)
class ModeResolution:
    mode: LogprobsMode
    source: ModeSource

    @property
    def detected(self) -> bool:
        """Decided from the record itself (the replay or the padding), not stated nor defaulted."""
        return self.source in (ModeSource.REPLAY, ModeSource.STRICTER, ModeSource.PADDING)


DEFAULT_MODE = LogprobsMode.PROCESSED


def detect_logprobs_mode(top_token_ids: Iterable[Iterable[int]]) -> LogprobsMode | None:
    """The spec's padding count over the executor's per-position top-k token ids; None when there are
    fewer than 10 ids. A position may be given as its ids or as its {token id: logprob} mapping."""
    total = 0
    low = 0
    for position in top_token_ids:
        for token in position:
            total += 1
            low += int(token) < _LOW_ID_LIMIT
    if total < _MIN_IDS:
        return None
    return LogprobsMode.PROCESSED if low / total > _LOW_SHARE else LogprobsMode.RAW


def replay_logprobs_mode(distances: Mapping[LogprobsMode, float]) -> ModeResolution | None:
    """From the record's distance to each mode's replay lists: the mode it matches clearly better (REPLAY),
    else the one it matches worse (STRICTER); None when the distances are equal, not both given, or not
    finite numbers >= 0 (the tokens differ: nothing to compare)."""
    raw, processed = distances.get(LogprobsMode.RAW), distances.get(LogprobsMode.PROCESSED)
    if (
        raw is None
        or processed is None
        or not all(math.isfinite(d) and d >= 0 for d in (raw, processed))
        or raw == processed
    ):
        return None
    nearer, farther = (
        (LogprobsMode.RAW, LogprobsMode.PROCESSED) if raw < processed else (LogprobsMode.PROCESSED, LogprobsMode.RAW)
    )
    if min(raw, processed) <= REPLAY_DECISIVE_RATIO * max(raw, processed):
        return ModeResolution(nearer, ModeSource.REPLAY)
    return ModeResolution(farther, ModeSource.STRICTER)


def modes_indistinguishable(between_modes: float, distances: Mapping[LogprobsMode, float]) -> bool:
    """Whether a record cannot tell the two modes apart: the distance between the replay's raw and processed
    lists (`between_modes`) is 0, or at most the record's distance to the nearer of them. Its verdict is then
    the same in either mode up to that distance, and either mode is a right name for it."""
    if between_modes == 0:
        return True
    known = [d for d in distances.values() if math.isfinite(d) and d >= 0]
    return len(known) == 2 and math.isfinite(between_modes) and between_modes <= min(known)


def stated_logprobs_mode(
    explicit: str | LogprobsMode | None, request_mode: str | LogprobsMode | None = None
) -> ModeResolution | None:
    """The mode stated by the item, else by the original request; None when neither states one."""
    for stated, source in ((explicit, ModeSource.ITEM), (request_mode, ModeSource.REQUEST)):
        if stated is not None:
            return ModeResolution(_parsed(stated), source)
    return None


def resolve_logprobs_mode(
    explicit: str | LogprobsMode | None,
    top_token_ids: Iterable[Iterable[int]],
    default: LogprobsMode = DEFAULT_MODE,
    *,
    request_mode: str | LogprobsMode | None = None,
    replay_distances: Mapping[LogprobsMode, float] | None = None,
) -> ModeResolution:
    """The mode a record is judged in: stated (item, then request) > the replay's two lists > the padding
    count > `default`. `replay_distances`: the record's distance to each mode's replay lists, when the
    replay computed both."""
    stated = stated_logprobs_mode(explicit, request_mode)
    if stated is not None:
        return stated
    from_replay = replay_logprobs_mode(replay_distances or {})
    if from_replay is not None:
        return from_replay
    padded = detect_logprobs_mode(top_token_ids)
    if padded is not None:
        return ModeResolution(padded, ModeSource.PADDING)
    return ModeResolution(default, ModeSource.DEFAULT)


def _parsed(mode: str | LogprobsMode) -> LogprobsMode:
    try:
        return LogprobsMode(mode)
    except ValueError as exc:
        valid = ", ".join(m.value for m in LogprobsMode)
        raise ValueError(f"unknown logprobs mode {mode!r}; expected one of {valid}") from exc
