"""Builds ValidateInference items from plain Python values (a request and the executor's record)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gonka.mlnode.client.requests import LOGPROBS_MODES
from gonka.mlnode.v1 import inference_pb2 as pb
from gonka.mlnode.v1 import validation_pb2 as vpb

# An item that states no mode leaves it to the validator.
MODES: dict[str | None, pb.LogprobsMode] = dict([(None, pb.LOGPROBS_MODE_UNSPECIFIED), *LOGPROBS_MODES.items()])


def inference_item(
    request: pb.GenerateRequest,
    token_ids: Sequence[int],
    top_lists: Sequence[Mapping[int, float]],
    *,
    threshold: float | None,
    mode: str | None = None,
    executor_could_not_serve: bool = False,
) -> vpb.InferenceItem:
    """One item: the original request and the executor's positions (token id and its top-k {id: logprob}
    per position, as the chain records them); `mode` None lets the server detect it. `threshold` None
    leaves it unset, for a caller that fills it in later (the server refuses an item without one)."""
    if len(token_ids) != len(top_lists):
        raise ValueError(f"{len(token_ids)} token ids but {len(top_lists)} top-k lists")
    k = len(top_lists[0]) if top_lists else 0
    positions = vpb.ExecutorPositions(token_ids=list(token_ids), top_k=k)
    for index, top in enumerate(top_lists):
        if len(top) != k:
            raise ValueError(f"position {index} has {len(top)} top-k entries, position 0 has {k}")
        positions.top_ids.extend(top.keys())
        positions.top_logprobs.extend(top.values())
    item = vpb.InferenceItem(
        request=request, positions=positions, mode=MODES[mode], executor_could_not_serve=executor_could_not_serve
    )
    if threshold is not None:
        item.threshold = threshold
    return item
