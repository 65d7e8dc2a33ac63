"""One request's engine outputs -> GenerateResponse messages (columnar token batches).

Two kinds of engine output arrive: vLLM's RequestOutput (text, n > 1, prompt logprobs, final-only)
and the lean TokenDelta of the token streams (engine_ext.token_streams). Both are reduced to
the same per-output delta, then split into messages of at most `max_tokens_per_message` tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc
from vllm.outputs import RequestOutput

from engine_ext.token_streams import TokenDelta
from gonka.mlnode.v1 import inference_pb2 as pb
from server.errors import Reason, ServiceError
from server.logprob_columns import LogprobColumns, logprob_columns, token_delta_columns
from server.translation import GenerationPlan

FINISH_REASONS: dict[str, int] = {
    "stop": pb.FINISH_REASON_STOP,
    "length": pb.FINISH_REASON_LENGTH,
    "abort": pb.FINISH_REASON_ABORT,
}


@dataclass
class OutputDelta:
    """What one output (of n) produced since the last message, whatever the engine's format."""

    index: int
    token_ids: list[int]
    columns: LogprobColumns | None  # one entry per token id; None without logprobs
    text: str
    finish_reason: str | None
    stop_reason: int | str | None


def fill_token_batch(batch: pb.TokenBatch, ids: list[int], columns: LogprobColumns | None, k: int | None) -> None:
    """In place: building the sub-message inside its parent saves a copy per message."""
    batch.ids.extend(ids)
    if columns is None or k is None:
        return
    batch.logprobs.extend(columns.logprobs)
    batch.ranks.extend(columns.ranks)
    batch.top_k = k
    batch.top_ids.extend(columns.top_ids)
    batch.top_logprobs.extend(columns.top_logprobs)


class ResponseEncoder:
    def __init__(self, request_id: str, plan: GenerationPlan) -> None:
        self._request_id = request_id
        self._top_logprobs = plan.top_logprobs
        self._prompt_logprobs = plan.prompt_logprobs
        self._chunk = plan.max_tokens_per_message
        self._include_text = plan.include_text
        self._generated: dict[int, int] = {}
        self._prompt_logprobs_sent = False

    def encode(self, output: RequestOutput | TokenDelta) -> list[pb.GenerateResponse]:
        if isinstance(output, TokenDelta):
            if output.token_ids and (not self._chunk or len(output.token_ids) <= self._chunk):
                return [self._token_delta_message(output)]
            return self._messages(self._token_delta(output), output.prompt_length, output.num_cached_tokens)
        prompt_length = len(output.prompt_token_ids or ())
        messages: list[pb.GenerateResponse] = []
        for completion in output.outputs:
            delta = self._completion_delta(completion)
            messages.extend(self._messages(delta, prompt_length, output.num_cached_tokens or 0))
        if self._prompt_logprobs is not None and not self._prompt_logprobs_sent and output.prompt_logprobs:
            if not messages:
                messages.append(pb.GenerateResponse(request_id=self._request_id))
            messages[0].prompt_logprobs.CopyFrom(self._prompt_logprob_batch(output))
            self._prompt_logprobs_sent = True
        return messages

    def _token_delta_message(self, delta: TokenDelta) -> pb.GenerateResponse:
        """The common case (one engine step of a token stream, one message), without the general
        path's intermediate delta and slicing: it runs once per streamed token."""
        token_ids = delta.token_ids
        k = self._top_logprobs
        self._generated[0] = self._generated.get(0, 0) + len(token_ids)
        message = pb.GenerateResponse(request_id=self._request_id)
        fill_token_batch(message.tokens, token_ids, token_delta_columns(delta, k) if k is not None else None, k)
        if delta.finish_reason is not None:
            finished = OutputDelta(0, token_ids, None, "", delta.finish_reason, delta.stop_reason)
            message.finish.CopyFrom(self._finish(finished, delta.prompt_length, delta.num_cached_tokens))
        return message

    def _token_delta(self, delta: TokenDelta) -> OutputDelta:
        k = self._top_logprobs
        columns = token_delta_columns(delta, k) if k is not None and delta.token_ids else None
        return OutputDelta(0, delta.token_ids, columns, "", delta.finish_reason, delta.stop_reason)

    def _completion_delta(self, completion) -> OutputDelta:
        token_ids = list(completion.token_ids)
        k = self._top_logprobs
        columns = logprob_columns(completion.logprobs, token_ids, 0, k) if k is not None and token_ids else None
        text = completion.text if self._include_text else ""
        return OutputDelta(completion.index, token_ids, columns, text, completion.finish_reason, completion.stop_reason)

    def _messages(self, delta: OutputDelta, prompt_length: int, cached_tokens: int) -> list[pb.GenerateResponse]:
        token_ids = delta.token_ids
        self._generated[delta.index] = self._generated.get(delta.index, 0) + len(token_ids)
        if not token_ids and delta.finish_reason is None and not delta.text:
            return []
        step = self._chunk or len(token_ids) or 1
        messages = []
        for start in range(0, max(len(token_ids), 1), step):
            end = start + step
            columns = delta.columns.slice(start, end, self._top_logprobs) if delta.columns is not None else None
            message = pb.GenerateResponse(request_id=self._request_id, output_index=delta.index)
            fill_token_batch(message.tokens, token_ids[start:end], columns, self._top_logprobs)
            messages.append(message)
        last = messages[-1]
        if delta.text:
            last.text = delta.text
        if delta.finish_reason is not None:
            last.finish.CopyFrom(self._finish(delta, prompt_length, cached_tokens))
        return messages

    def _prompt_logprob_batch(self, output: RequestOutput) -> pb.PromptLogprobs:
        # Position 0 of vLLM's prompt logprobs is the unscored first token.
        scored_ids = list(output.prompt_token_ids[1:])
        columns = logprob_columns(output.prompt_logprobs, scored_ids, 1, self._prompt_logprobs)
        prompt_logprobs = pb.PromptLogprobs()
        fill_token_batch(prompt_logprobs.tokens, scored_ids, columns, self._prompt_logprobs)
        return prompt_logprobs

    def _finish(self, delta: OutputDelta, prompt_length: int, cached_tokens: int) -> pb.Finish:
        reason = FINISH_REASONS.get(delta.finish_reason)
        if reason is None:
            raise ServiceError(
                grpc.StatusCode.INTERNAL,
                Reason.INTERNAL_ERROR,
                f"the engine failed output {delta.index} ({delta.finish_reason}); retry the request",
            )
        usage = pb.Usage(
            prompt_tokens=prompt_length, completion_tokens=self._generated[delta.index], cached_tokens=cached_tokens
        )
        finish = pb.Finish(reason=reason, usage=usage)
        if isinstance(delta.stop_reason, str):
            finish.stop_string = delta.stop_reason
        elif isinstance(delta.stop_reason, int):
            finish.stop_token_id = delta.stop_reason
        return finish
