"""One request's vLLM RequestOutputs -> GenerateResponse messages (columnar token batches)."""

from __future__ import annotations

import grpc
from vllm.logprobs import FlatLogprobs
from vllm.outputs import CompletionOutput, RequestOutput

from gonka.mlnode.v1 import inference_pb2 as pb
from server.errors import Reason, ServiceError
from server.logprob_columns import logprob_columns
from server.translation import GenerationPlan

FINISH_REASONS: dict[str, int] = {
    "stop": pb.FINISH_REASON_STOP,
    "length": pb.FINISH_REASON_LENGTH,
    "abort": pb.FINISH_REASON_ABORT,
}


def token_batch(ids: list[int], flat: FlatLogprobs | None, first_position: int, k: int | None) -> pb.TokenBatch:
    """Positions first_position.. of `flat` as a TokenBatch (ids only when no logprobs were asked)."""
    if k is None or not ids:
        return pb.TokenBatch(ids=ids)
    columns = logprob_columns(flat, ids, first_position, k)
    return pb.TokenBatch(
        ids=ids,
        logprobs=columns.logprobs,
        ranks=columns.ranks,
        top_k=k,
        top_ids=columns.top_ids,
        top_logprobs=columns.top_logprobs,
    )


class ResponseEncoder:
    def __init__(self, request_id: str, plan: GenerationPlan) -> None:
        self._request_id = request_id
        self._top_logprobs = plan.top_logprobs
        self._prompt_logprobs = plan.prompt_logprobs
        self._chunk = plan.max_tokens_per_message
        self._include_text = plan.include_text
        self._generated: dict[int, int] = {}
        self._prompt_logprobs_sent = False

    def encode(self, output: RequestOutput) -> list[pb.GenerateResponse]:
        messages: list[pb.GenerateResponse] = []
        for completion in output.outputs:
            messages.extend(self._encode_completion(output, completion))
        if self._prompt_logprobs is not None and not self._prompt_logprobs_sent and output.prompt_logprobs:
            if not messages:
                messages.append(pb.GenerateResponse(request_id=self._request_id))
            messages[0].prompt_logprobs.CopyFrom(self._prompt_logprob_batch(output))
            self._prompt_logprobs_sent = True
        return messages

    def _encode_completion(self, output: RequestOutput, completion: CompletionOutput) -> list[pb.GenerateResponse]:
        token_ids = list(completion.token_ids)
        index = completion.index
        self._generated[index] = self._generated.get(index, 0) + len(token_ids)
        finish = self._finish(output, completion) if completion.finish_reason is not None else None
        text = completion.text if self._include_text else ""
        step = self._chunk or len(token_ids) or 1
        starts = range(0, len(token_ids), step) if token_ids else (0,)
        if not token_ids and finish is None and not text:
            return []
        messages = []
        for start in starts:
            chunk_ids = token_ids[start : start + step]
            message = pb.GenerateResponse(
                request_id=self._request_id, output_index=index, tokens=token_batch(chunk_ids, completion.logprobs, start, self._top_logprobs)
            )
            messages.append(message)
        last = messages[-1]
        if text:
            last.text = text
        if finish is not None:
            last.finish.CopyFrom(finish)
        return messages

    def _prompt_logprob_batch(self, output: RequestOutput) -> pb.PromptLogprobs:
        # Position 0 of vLLM's prompt logprobs is the unscored first token.
        scored_ids = list(output.prompt_token_ids[1:])
        return pb.PromptLogprobs(tokens=token_batch(scored_ids, output.prompt_logprobs, 1, self._prompt_logprobs))

    def _finish(self, output: RequestOutput, completion: CompletionOutput) -> pb.Finish:
        reason = FINISH_REASONS.get(completion.finish_reason)
        if reason is None:
            raise ServiceError(
                grpc.StatusCode.INTERNAL,
                Reason.INTERNAL_ERROR,
                f"the engine failed output {completion.index} ({completion.finish_reason}); retry the request",
            )
        usage = pb.Usage(
            prompt_tokens=len(output.prompt_token_ids or ()),
            completion_tokens=self._generated[completion.index],
            cached_tokens=output.num_cached_tokens or 0,
        )
        finish = pb.Finish(reason=reason, usage=usage)
        stop_reason = completion.stop_reason
        if isinstance(stop_reason, str):
            finish.stop_string = stop_reason
        elif isinstance(stop_reason, int):
            finish.stop_token_id = stop_reason
        return finish
