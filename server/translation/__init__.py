"""GenerateRequest -> what the engine needs (prompt ids, SamplingParams) plus how to stream it back.

Everything is validated here, before the engine sees it, so bad input fails with the field named
and the engine keeps serving.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vllm.sampling_params import SamplingParams

from gonka.mlnode.v1 import inference_pb2 as pb
from server.errors import invalid_field
from server.model_facts import ModelFacts
from server.translation.prompt import prompt_token_ids
from server.translation.sampling import logprob_counts, sampling_params
from server.translation.structured_output import constraint_field, structured_outputs_params

MAX_REQUEST_ID_LENGTH = 256
MAX_COALESCE_MS = 60_000


@dataclass(frozen=True)
class GenerationPlan:
    prompt_token_ids: list[int]
    sampling_params: SamplingParams
    # Top alternatives per generated / prompt position; None: not asked for.
    top_logprobs: int | None
    prompt_logprobs: int | None
    max_tokens_per_message: int
    include_text: bool
    # How long to hold tokens after a message so that the next carries several (0: never).
    coalesce_seconds: float
    # `structured_output.<kind>` when the request is constrained (names the field if vLLM rejects it).
    constraint_field: str | None


class RequestTranslator:
    def __init__(self, facts: ModelFacts, tokenizer: Any) -> None:
        self._facts = facts
        self._tokenizer = tokenizer

    def plan(self, request: pb.GenerateRequest) -> GenerationPlan:
        if len(request.request_id) > MAX_REQUEST_ID_LENGTH:
            raise invalid_field("request_id", f"must be at most {MAX_REQUEST_ID_LENGTH} characters")
        if request.stream.coalesce_ms > MAX_COALESCE_MS:
            raise invalid_field("stream.coalesce_ms", f"must be at most {MAX_COALESCE_MS}")
        prompt = prompt_token_ids(request, self._tokenizer, self._facts)
        logprobs = logprob_counts(request, self._facts)
        params = sampling_params(request, len(prompt), self._facts, logprobs, structured_outputs_params(request))
        return GenerationPlan(
            prompt_token_ids=prompt,
            sampling_params=params,
            top_logprobs=logprobs.generated,
            prompt_logprobs=logprobs.prompt,
            max_tokens_per_message=request.stream.max_tokens_per_message,
            include_text=request.stream.include_text,
            coalesce_seconds=request.stream.coalesce_ms / 1000,
            constraint_field=constraint_field(request),
        )
