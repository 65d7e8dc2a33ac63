"""What the engine wrapper yields, on both of its output paths: the project's own types, not vLLM's.

Every engine step of a request becomes one GenerationStep: per output (of n) the new token ids,
their logprobs in columns, the text delta (when asked for) and, on the output's last step, its
Finish. The server encodes these and never sees vLLM's RequestOutput or logprob containers.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class FinishReason(enum.Enum):
    STOP = "stop"  # end of sequence, a stop string or a stop token id
    LENGTH = "length"  # max_tokens or the end of the context
    ABORT = "abort"  # aborted (Abort, shutdown, pause)
    ERROR = "error"  # the engine failed this output alone (vLLM: a request-level error)


@dataclass(slots=True)
class LogprobColumns:
    """Per position: the chosen token's logprob and rank; `k` alternatives each, position-major."""

    logprobs: list[float] = field(default_factory=list)
    ranks: list[int] = field(default_factory=list)
    top_ids: list[int] = field(default_factory=list)
    top_logprobs: list[float] = field(default_factory=list)

    def slice(self, start: int, end: int, k: int) -> LogprobColumns:
        """Positions start..end-1 (itself when that is every position: no copies on the common path)."""
        if start == 0 and end >= len(self.logprobs):
            return self
        return LogprobColumns(
            self.logprobs[start:end],
            self.ranks[start:end],
            self.top_ids[start * k : end * k],
            self.top_logprobs[start * k : end * k],
        )


@dataclass(slots=True)
class Finish:
    reason: FinishReason
    # The stop string or stop token id that matched (None for end of sequence and the rest).
    stop_reason: int | str | None
    prompt_tokens: int
    cached_tokens: int


@dataclass(slots=True)
class OutputDelta:
    """What one output produced since the last step the consumer took."""

    index: int
    token_ids: list[int]
    logprobs: LogprobColumns | None  # one entry per token id; None without logprobs
    text: str
    finish: Finish | None
    # A request asking for both logprobs modes (GenerationRequest.both_logprobs_modes): `logprobs`
    # holds the processed ones, this the raw ones (no ranks). None otherwise.
    raw_logprobs: LogprobColumns | None = None


@dataclass(slots=True)
class PromptLogprobs:
    """Prompt positions 1..P-1 (the first prompt token has no logprob)."""

    token_ids: list[int]
    logprobs: LogprobColumns


@dataclass(slots=True)
class GenerationStep:
    # The outputs with news in this step (with n > 1, not necessarily all of them).
    outputs: list[OutputDelta]
    # Every output of the request has finished: this is its last step.
    finished: bool
    # On the first step that carries them, when prompt logprobs were asked for.
    prompt_logprobs: PromptLogprobs | None = None
