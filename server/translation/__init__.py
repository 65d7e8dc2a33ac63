"""GenerateRequest -> the engine's GenerationRequest plus how to stream it back.

Everything is validated here, before the engine sees it, so bad input fails with the field named
and the engine keeps serving.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from engine_ext.consensus.logprobs_mode import LogprobsMode
from engine_ext.generation.generation_request import GenerationRequest
from engine_ext.model_facts import ModelFacts
from gonka.mlnode.v1 import inference_pb2 as pb
from server.core.errors import invalid_field
from server.translation.prompt import PromptReader
from server.translation.replay import enforced_token_ids, logprobs_mode
from server.translation.sampling import LogprobCounts, logprob_counts, sampling_choice
from server.translation.structured_output import constraint, constraint_field

MAX_REQUEST_ID_LENGTH = 256
MAX_COALESCE_MS = 60_000


@dataclass(frozen=True)
class GenerationPlan:
    request: GenerationRequest
    max_tokens_per_message: int
    # How long to hold tokens after a message so that the next carries several (0: never).
    coalesce_seconds: float
    # `structured_output.<kind>` when the request is constrained (names the field if the engine rejects it).
    constraint_field: str | None
    # Report the chain's top list per position beside the model's own.
    chain_top_logprobs: bool = False
    # Send the prompt's token ids (as run) on the first message.
    include_prompt_token_ids: bool = False


class RequestTranslator:
    def __init__(self, facts: ModelFacts, prompts: PromptReader) -> None:
        self._facts = facts
        self._prompts = prompts

    async def plan(self, request: pb.GenerateRequest, request_id: str) -> GenerationPlan:
        """Cheap checks first; tokenization or template rendering (off the event loop) last."""
        if len(request.request_id) > MAX_REQUEST_ID_LENGTH:
            raise invalid_field("request_id", f"must be at most {MAX_REQUEST_ID_LENGTH} characters")
        if request.stream.coalesce_ms > MAX_COALESCE_MS:
            raise invalid_field("stream.coalesce_ms", f"must be at most {MAX_COALESCE_MS}")
        logprobs = logprob_counts(request, self._facts)
        mode = logprobs_mode(request)
        chain = request.logprobs.chain_top_logprobs
        return await self._translated(
            request, request_id, logprobs, mode, chain, request.enforced_token_ids, request.stream
        )

    async def replay(
        self, original: pb.GenerateRequest, request_id: str, enforced: Sequence[int], top_logprobs: int | None = None
    ) -> GenerationPlan:
        """A replay of `original` (another node's request), translated once with Generate's checks: its request_id
        and stream options are not the replay's and go unchecked, `enforced` takes the place of its enforced tokens,
        and `top_logprobs` (the chain's k), when given, of its generated logprobs, mode and chain lists; the caller
        then sets the mode it replays in."""
        if top_logprobs is None:
            logprobs = logprob_counts(original, self._facts)
            mode, chain = logprobs_mode(original), original.logprobs.chain_top_logprobs
        else:
            logprobs, mode, chain = logprob_counts(original, self._facts, top_logprobs), None, False
        return await self._translated(original, request_id, logprobs, mode, chain, enforced, pb.StreamOptions())

    async def _translated(
        self,
        request: pb.GenerateRequest,
        request_id: str,
        logprobs: LogprobCounts,
        mode: LogprobsMode | None,
        chain_top_logprobs: bool,
        enforced_ids: Sequence[int],
        stream: pb.StreamOptions,
    ) -> GenerationPlan:
        enforced = enforced_token_ids(enforced_ids, request, self._facts)
        chosen_constraint = constraint(request)
        prompt = await self._prompts.prompt_token_ids(request)
        sampling = sampling_choice(request, len(prompt), self._facts)
        generation = GenerationRequest(
            request_id=request_id,
            prompt_token_ids=prompt,
            sampling=sampling.options,
            stop=sampling.stop,
            stop_token_ids=sampling.stop_token_ids,
            top_logprobs=logprobs.generated,
            prompt_logprobs=logprobs.prompt,
            constraint=chosen_constraint,
            include_text=stream.include_text,
            final_only=stream.final_only,
            enforced_token_ids=enforced,
            logprobs_mode=mode,
        )
        return GenerationPlan(
            request=generation,
            max_tokens_per_message=stream.max_tokens_per_message,
            coalesce_seconds=stream.coalesce_ms / 1000,
            constraint_field=constraint_field(request),
            chain_top_logprobs=chain_top_logprobs,
            include_prompt_token_ids=stream.include_prompt_token_ids,
        )
