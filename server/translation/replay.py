"""The request's replay fields: enforced tokens and the logprobs mode, checked before the engine sees them."""

from __future__ import annotations

from collections.abc import Sequence

from engine_ext.consensus.logprobs_mode import LogprobsMode
from engine_ext.model_facts import ModelFacts
from gonka.mlnode.v1 import inference_pb2 as pb
from server.core.errors import invalid_field
from server.translation.prompt import require_in_vocabulary

LOGPROBS_MODES: dict[pb.LogprobsMode, LogprobsMode | None] = {
    pb.LOGPROBS_MODE_UNSPECIFIED: None,
    pb.LOGPROBS_MODE_RAW: LogprobsMode.RAW,
    pb.LOGPROBS_MODE_PROCESSED: LogprobsMode.PROCESSED,
}
# The contract's value of each mode (the inverse of LOGPROBS_MODES).
LOGPROBS_MODE_VALUES: dict[LogprobsMode, pb.LogprobsMode] = {
    mode: value for value, mode in LOGPROBS_MODES.items() if mode is not None
}


def logprobs_mode(request: pb.GenerateRequest) -> LogprobsMode | None:
    """The stated mode (None: the server's default)."""
    options = request.logprobs
    if options.mode not in LOGPROBS_MODES:
        known = ", ".join(pb.LogprobsMode.Name(value) for value in LOGPROBS_MODES)
        raise invalid_field("logprobs.mode", f"unknown mode {options.mode}; expected one of {known}")
    if options.chain_top_logprobs and not (options.HasField("top_logprobs") and options.top_logprobs >= 1):
        raise invalid_field("logprobs.chain_top_logprobs", "needs logprobs.top_logprobs >= 1")
    return LOGPROBS_MODES[options.mode]


def enforced_token_ids(
    enforced: Sequence[int], request: pb.GenerateRequest, facts: ModelFacts
) -> tuple[int, ...] | None:
    """The tokens a replay of `request` forces (None: not a replay); ids outside the vocabulary never reach the
    engine."""
    ids = list(enforced)
    if not ids:
        return None
    require_in_vocabulary(ids, facts, "enforced_token_ids")
    if request.sampling.HasField("n") and request.sampling.n != 1:
        raise invalid_field("sampling.n", "a replay (enforced_token_ids) has exactly one output: n must be 1")
    return tuple(ids)
