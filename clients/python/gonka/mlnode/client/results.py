"""A whole generation, assembled from its stream of GenerateResponse messages."""

from __future__ import annotations

from dataclasses import dataclass, field

from gonka.mlnode.client.requests import LOGPROBS_MODES
from gonka.mlnode.v1 import inference_pb2 as pb

# The name of each mode the server reports (the inverse of the request's names).
REPORTED_MODES = {value: name for name, value in LOGPROBS_MODES.items()}


@dataclass
class TokenLogprobs:
    """Per position: the chosen token's logprob and rank, and the top-k alternatives."""

    logprobs: list[float] = field(default_factory=list)
    ranks: list[int] = field(default_factory=list)
    top_ids: list[list[int]] = field(default_factory=list)
    top_logprobs: list[list[float]] = field(default_factory=list)
    # The chain's list per position (sampled token first), when asked for.
    chain_top: list[dict[int, float]] = field(default_factory=list)

    def extend(self, batch: pb.TokenBatch) -> None:
        self.logprobs.extend(batch.logprobs)
        self.ranks.extend(batch.ranks)
        k = batch.top_k
        if not k:
            return
        for start in range(0, len(batch.top_ids), k):
            self.top_ids.append(list(batch.top_ids[start : start + k]))
            self.top_logprobs.append(list(batch.top_logprobs[start : start + k]))
        for start in range(0, len(batch.chain_top_ids), k):
            self.chain_top.append(
                dict(zip(batch.chain_top_ids[start : start + k], batch.chain_top_logprobs[start : start + k]))
            )


@dataclass
class Output:
    index: int
    token_ids: list[int] = field(default_factory=list)
    text: str = ""
    logprobs: TokenLogprobs = field(default_factory=TokenLogprobs)
    finish_reason: str | None = None  # "stop", "length", "abort" or "error"
    stop_reason: str | int | None = None
    usage: pb.Usage | None = None
    messages: int = 0
    # "raw" or "processed": the mode the server says the logprobs ran in (None without logprobs).
    logprobs_mode: str | None = None


@dataclass
class Generation:
    request_id: str = ""
    outputs: dict[int, Output] = field(default_factory=dict)
    prompt_token_ids: list[int] = field(default_factory=list)  # positions 1.., with prompt logprobs
    prompt_logprobs: TokenLogprobs | None = None
    # The whole prompt as the engine ran it, with include_prompt_token_ids.
    prompt_as_run: list[int] = field(default_factory=list)

    def add(self, response: pb.GenerateResponse) -> None:
        self.request_id = response.request_id
        output = self.outputs.setdefault(response.output_index, Output(response.output_index))
        output.messages += 1
        output.token_ids.extend(response.tokens.ids)
        output.text += response.text
        output.logprobs.extend(response.tokens)
        if response.prompt_token_ids:
            self.prompt_as_run = list(response.prompt_token_ids)
        if response.HasField("prompt_logprobs"):
            self.prompt_token_ids = list(response.prompt_logprobs.tokens.ids)
            self.prompt_logprobs = TokenLogprobs()
            self.prompt_logprobs.extend(response.prompt_logprobs.tokens)
        if response.HasField("finish"):
            finish = response.finish
            output.finish_reason = pb.FinishReason.Name(finish.reason).removeprefix("FINISH_REASON_").lower()
            kind = finish.WhichOneof("stop_reason")
            output.stop_reason = None if kind is None else getattr(finish, kind)
            output.usage = finish.usage
            output.logprobs_mode = REPORTED_MODES.get(finish.logprobs_mode)

    @property
    def first(self) -> Output:
        return self.outputs[min(self.outputs)]

    @property
    def finished(self) -> bool:
        return bool(self.outputs) and all(output.finish_reason is not None for output in self.outputs.values())
