"""One request's GenerationSteps -> GenerateResponse messages (columnar token batches).

Each output's tokens are split into messages of at most `max_tokens_per_message` tokens; the last
message of an output carries its finish. Logprobs of -inf are reported as -9999.0, the network's
convention (as OpenAI-compatible servers report them).
"""

from __future__ import annotations

import math

from engine_ext.consensus.logprobs_mode import DEFAULT_MODE, LogprobsMode
from engine_ext.consensus.topk_list import reported_logprob
from engine_ext.generation.chain_lists import chain_top_lists
from engine_ext.generation.outputs import Finish, FinishReason, GenerationStep, LogprobColumns, OutputDelta
from gonka.mlnode.v1 import inference_pb2 as pb
from server.translation import GenerationPlan
from server.translation.replay import LOGPROBS_MODE_VALUES

FINISH_REASONS: dict[FinishReason, pb.FinishReason] = {
    FinishReason.STOP: pb.FINISH_REASON_STOP,
    FinishReason.LENGTH: pb.FINISH_REASON_LENGTH,
    FinishReason.ABORT: pb.FINISH_REASON_ABORT,
    FinishReason.ERROR: pb.FINISH_REASON_ERROR,
}
NEG_INF = -math.inf


def fill_token_batch(
    batch: pb.TokenBatch, ids: list[int], columns: LogprobColumns | None, k: int | None, chain: bool = False
) -> None:
    """In place: building the sub-message inside its parent saves a copy per message."""
    batch.ids.extend(ids)
    if columns is None or k is None:
        return
    batch.logprobs.extend(_reported(columns.logprobs))
    batch.ranks.extend(columns.ranks)
    batch.top_k = k
    batch.top_ids.extend(columns.top_ids)
    batch.top_logprobs.extend(_reported(columns.top_logprobs))
    if chain:
        for entries in chain_top_lists(ids, columns, k):
            batch.chain_top_ids.extend(token for token, _ in entries)
            batch.chain_top_logprobs.extend(logprob for _, logprob in entries)


class ResponseEncoder:
    def __init__(
        self, request_id: str, plan: GenerationPlan, default_logprobs_mode: LogprobsMode = DEFAULT_MODE
    ) -> None:
        """`default_logprobs_mode`: the server's, for a request that asks for logprobs in none."""
        self._request_id = request_id
        self._top_logprobs = plan.request.top_logprobs
        # Said on each output's finish: the mode its logprobs were computed in.
        self._logprobs_mode = (
            LOGPROBS_MODE_VALUES[plan.request.logprobs_mode or default_logprobs_mode]
            if plan.request.top_logprobs is not None
            else pb.LOGPROBS_MODE_UNSPECIFIED
        )
        self._prompt_logprobs = plan.request.prompt_logprobs
        self._chunk = plan.max_tokens_per_message
        self._chain = plan.chain_top_logprobs
        # Sent on the first message when asked for, then never again.
        self._prompt_token_ids = plan.request.prompt_token_ids if plan.include_prompt_token_ids else None
        # Tokens sent so far per output index (the usage's completion tokens).
        self._generated: dict[int, int] = {}

    def encode(self, step: GenerationStep) -> list[pb.GenerateResponse]:
        messages = self._encode(step)
        if self._prompt_token_ids is not None:
            if not messages:
                messages.append(pb.GenerateResponse(request_id=self._request_id))
            messages[0].prompt_token_ids.extend(self._prompt_token_ids)
            self._prompt_token_ids = None
        return messages

    def _encode(self, step: GenerationStep) -> list[pb.GenerateResponse]:
        outputs = step.outputs
        if len(outputs) == 1 and step.prompt_logprobs is None:
            delta = outputs[0]
            if delta.token_ids and (not self._chunk or len(delta.token_ids) <= self._chunk):
                return [self._single_message(delta)]
        messages: list[pb.GenerateResponse] = []
        for delta in outputs:
            messages.extend(self._messages(delta))
        if step.prompt_logprobs is not None and self._prompt_logprobs is not None:
            if not messages:
                messages.append(pb.GenerateResponse(request_id=self._request_id))
            prompt = step.prompt_logprobs
            fill_token_batch(
                messages[0].prompt_logprobs.tokens, prompt.token_ids, prompt.logprobs, self._prompt_logprobs
            )
        return messages

    def _single_message(self, delta: OutputDelta) -> pb.GenerateResponse:
        """The common case (one engine step, one output, one message), without the general path's
        slicing: it runs once per streamed token."""
        self._generated[delta.index] = self._generated.get(delta.index, 0) + len(delta.token_ids)
        message = pb.GenerateResponse(request_id=self._request_id, output_index=delta.index)
        fill_token_batch(message.tokens, delta.token_ids, delta.logprobs, self._top_logprobs, self._chain)
        if delta.text:
            message.text = delta.text
        if delta.finish is not None:
            self._fill_finish(message.finish, delta.finish, delta.index)
        return message

    def _messages(self, delta: OutputDelta) -> list[pb.GenerateResponse]:
        token_ids = delta.token_ids
        self._generated[delta.index] = self._generated.get(delta.index, 0) + len(token_ids)
        if not token_ids and delta.finish is None and not delta.text:
            return []
        step = self._chunk or len(token_ids) or 1
        messages = []
        for start in range(0, max(len(token_ids), 1), step):
            end = start + step
            columns = delta.logprobs.slice(start, end, self._top_logprobs or 0) if delta.logprobs is not None else None
            message = pb.GenerateResponse(request_id=self._request_id, output_index=delta.index)
            fill_token_batch(message.tokens, token_ids[start:end], columns, self._top_logprobs, self._chain)
            messages.append(message)
        last = messages[-1]
        if delta.text:
            last.text = delta.text
        if delta.finish is not None:
            self._fill_finish(last.finish, delta.finish, delta.index)
        return messages

    def _fill_finish(self, target: pb.Finish, finish: Finish, index: int) -> None:
        target.reason = FINISH_REASONS[finish.reason]
        target.logprobs_mode = self._logprobs_mode
        usage = target.usage
        usage.prompt_tokens = finish.prompt_tokens
        usage.completion_tokens = self._generated.get(index, 0)
        usage.cached_tokens = finish.cached_tokens
        if isinstance(finish.stop_reason, str):
            target.stop_string = finish.stop_reason
        elif isinstance(finish.stop_reason, int):
            target.stop_token_id = finish.stop_reason


def _reported(values: list[float]) -> list[float]:
    if NEG_INF not in values:
        return values
    return [reported_logprob(value) for value in values]
