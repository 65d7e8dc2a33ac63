"""The verdict on one replayed inference, as the chain judges it (inference-validation.md 3).

Pure: the executor's recorded positions and the replay's, each (token id, top-k {id: logprob}),
in; pass or fail with the reason and where, out. The distance itself is the consensus core's.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from engine_ext.consensus.inference_distance import Position, inference_passes, sequence_distance, similarity


class InferenceFailure(enum.Enum):
    SIMILARITY_BELOW_THRESHOLD = "similarity_below_threshold"
    LENGTH_DIFFERS = "length_differs"
    TOKEN_DIFFERS = "token_differs"
    EMPTY_TOP_K = "empty_top_k"


@dataclass(frozen=True)
class InferenceJudgement:
    passed: bool
    distance: float
    similarity: float
    failure: InferenceFailure | None = None
    # Where the sequences part (length or token failures).
    first_differing_position: int | None = None
    executor_token_id: int | None = None
    replay_token_id: int | None = None
    # Share of the executor's top-k ids that the replay's lists hold too (over the compared positions).
    top_ids_found: float = 0.0


def judge_inference(
    executor: Sequence[Position], replay: Sequence[Position], k: int, threshold: float
) -> InferenceJudgement:
    for position, (token, top) in enumerate(executor):
        if not top:
            return InferenceJudgement(False, float("nan"), 0.0, InferenceFailure.EMPTY_TOP_K, position, token)
    for position, ((executor_token, _), (replay_token, _)) in enumerate(zip(executor, replay)):
        if executor_token != replay_token:
            return InferenceJudgement(
                False,
                -1.0,
                0.0,
                InferenceFailure.TOKEN_DIFFERS,
                position,
                executor_token,
                replay_token,
                _found(executor, replay),
            )
    if len(executor) != len(replay):
        position = min(len(executor), len(replay))
        executor_next = executor[position][0] if position < len(executor) else None
        replay_next = replay[position][0] if position < len(replay) else None
        return InferenceJudgement(
            False,
            -1.0,
            0.0,
            InferenceFailure.LENGTH_DIFFERS,
            position,
            executor_next,
            replay_next,
            _found(executor, replay),
        )
    distance = sequence_distance(executor, replay, k)
    similar = similarity(distance)
    passed = inference_passes(similar, threshold)
    failure = None if passed else InferenceFailure.SIMILARITY_BELOW_THRESHOLD
    return InferenceJudgement(passed, distance, similar, failure, top_ids_found=_found(executor, replay))


def _found(executor: Sequence[Position], replay: Sequence[Position]) -> float:
    total = found = 0
    for (_, executor_top), (_, replay_top) in zip(executor, replay):
        total += len(executor_top)
        found += sum(token in replay_top for token in executor_top)
    return found / total if total else 0.0
