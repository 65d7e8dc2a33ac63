"""The engine's generation steps as the bodies and stream chunks vLLM's OpenAI server answers with, but with every
token named by its decimal id (spec section 2: the API node rejects text in `logprobs.content[].token`).

Top lists are built as vLLM builds them from its per-position dict (the sampled token first, then the model's best
others, -inf as -9999.0): chat `top_logprobs` hold k entries (inference-validation.md 4, the chain's list), the
completions endpoint's hold up to k+1 (the sampled token and the model's top k), as vLLM slices each.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Literal

from engine_ext.consensus.topk_list import floored_logprob
from engine_ext.generation.chain_lists import chain_top_lists
from engine_ext.generation.outputs import Finish, FinishReason, GenerationStep, LogprobColumns, OutputDelta

Kind = Literal["chat", "completion"]


@dataclass
class Choice:
    index: int
    token_ids: list[int] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    # Chat: the `logprobs.content` entries; completions: the columns of vLLM's legacy logprobs object.
    content: list[dict[str, Any]] = field(default_factory=list)
    tokens: list[str] = field(default_factory=list)
    token_logprobs: list[float] = field(default_factory=list)
    top_logprobs: list[dict[str, float]] = field(default_factory=list)
    finish: Finish | None = None


class OpenAIAnswer:
    """One request's answer, built step by step: `chunks(step)` for a stream, `body()` once finished."""

    def __init__(
        self,
        kind: Kind,
        request_id: str,
        model: str,
        prompt_token_ids: list[int],
        n: int,
        top_logprobs: int | None,
        return_token_ids: bool,
    ) -> None:
        self._kind = kind
        self.id = f"{'chatcmpl' if kind == 'chat' else 'cmpl'}-{request_id}"
        self._created = int(time.time())
        self._model = model
        self._prompt_token_ids = prompt_token_ids
        self._top_logprobs = top_logprobs
        self._return_token_ids = return_token_ids
        self._choices = [Choice(index) for index in range(n)]
        self._started = False

    def add(self, step: GenerationStep) -> list[dict[str, Any]]:
        """Records the step; returns its stream chunks."""
        chunks: list[dict[str, Any]] = []
        first = not self._started
        self._started = True
        if first and self._kind == "chat":
            chunks.extend(self._chunk([self._role_choice(choice.index)]) for choice in self._choices)
        chunks.extend(self._chunk([self._record(delta)]) for delta in step.outputs)
        if first and chunks and self._return_token_ids:
            # vLLM's first chunk of a stream carries the prompt's ids.
            chunks[0]["prompt_token_ids"] = self._prompt_token_ids
        return chunks

    def usage(self) -> dict[str, Any]:
        prompt = len(self._prompt_token_ids)
        completion = sum(len(choice.token_ids) for choice in self._choices)
        return {"prompt_tokens": prompt, "total_tokens": prompt + completion, "completion_tokens": completion}

    def usage_chunk(self) -> dict[str, Any]:
        return self._chunk([]) | {"usage": self.usage()}

    def body(self) -> dict[str, Any]:
        choices = [self._whole_choice(choice) for choice in self._choices]
        body: dict[str, Any] = {
            "id": self.id,
            "object": "chat.completion" if self._kind == "chat" else "text_completion",
            "created": self._created,
            "model": self._model,
            "choices": choices,
            "usage": self.usage(),
        }
        if self._return_token_ids:
            body["prompt_token_ids"] = self._prompt_token_ids
        return body

    def _chunk(self, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "chat.completion.chunk" if self._kind == "chat" else "text_completion",
            "created": self._created,
            "model": self._model,
            "choices": choices,
        }

    def _role_choice(self, index: int) -> dict[str, Any]:
        return {"index": index, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}

    def _record(self, delta: OutputDelta) -> dict[str, Any]:
        """Adds the delta to its choice; returns the delta as one stream chunk's choice."""
        choice = self._choices[delta.index]
        choice.token_ids.extend(delta.token_ids)
        choice.text.append(delta.text)
        if delta.finish is not None:
            choice.finish = delta.finish
        logprobs = None
        if self._top_logprobs is not None and delta.logprobs is not None:
            logprobs = self._add_logprobs(choice, delta.token_ids, delta.logprobs)
        streamed: dict[str, Any] = {"index": delta.index}
        if self._kind == "chat":
            streamed["delta"] = {"content": delta.text}
        else:
            streamed["text"] = delta.text
        streamed |= {"logprobs": logprobs, **_finish_fields(delta.finish)}
        if self._return_token_ids:
            streamed["token_ids"] = delta.token_ids
        return streamed

    def _add_logprobs(self, choice: Choice, token_ids: list[int], columns: LogprobColumns) -> dict[str, Any]:
        k = self._top_logprobs or 0
        if self._kind == "chat":
            lists = chain_top_lists(token_ids, columns, k) if k else [[] for _ in token_ids]
            entries = [
                _entry(token, logprob) | {"top_logprobs": [_entry(top, value) for top, value in top_list]}
                for token, logprob, top_list in zip(token_ids, columns.logprobs, lists)
            ]
            choice.content.extend(entries)
            return {"content": entries}
        tokens = [str(token) for token in token_ids]
        logprobs = [floored_logprob(value) for value in columns.logprobs]
        tops = [_sampled_and_top(position, token, columns, k) for position, token in enumerate(token_ids)]
        choice.tokens.extend(tokens)
        choice.token_logprobs.extend(logprobs)
        choice.top_logprobs.extend(tops)
        return {"tokens": tokens, "token_logprobs": logprobs, "top_logprobs": tops, "text_offset": []}

    def _whole_choice(self, choice: Choice) -> dict[str, Any]:
        text = "".join(choice.text)
        whole: dict[str, Any] = {"index": choice.index}
        logprobs: dict[str, Any] | None = None
        if self._kind == "chat":
            whole["message"] = {"role": "assistant", "content": text, "tool_calls": []}
            if self._top_logprobs is not None:
                logprobs = {"content": choice.content}
        else:
            whole["text"] = text
            if self._top_logprobs is not None:
                logprobs = {
                    "tokens": choice.tokens,
                    "token_logprobs": choice.token_logprobs,
                    "top_logprobs": choice.top_logprobs,
                    "text_offset": [],
                }
        whole |= {"logprobs": logprobs, **_finish_fields(choice.finish)}
        if self._return_token_ids:
            whole["token_ids"] = choice.token_ids
        return whole


def _finish_fields(finish: Finish | None) -> dict[str, Any]:
    if finish is None:
        return {"finish_reason": None}
    return {"finish_reason": FINISH_REASONS[finish.reason], "stop_reason": finish.stop_reason}


FINISH_REASONS = {
    FinishReason.STOP: "stop",
    FinishReason.LENGTH: "length",
    FinishReason.ABORT: "abort",
    FinishReason.ERROR: "error",
}


def _entry(token: int, logprob: float) -> dict[str, Any]:
    return {"token": str(token), "logprob": floored_logprob(logprob), "bytes": None}


def _sampled_and_top(position: int, token: int, columns: LogprobColumns, k: int) -> dict[str, float]:
    """vLLM's completions list: the sampled token, then the model's top k (a token listed once)."""
    listed = {str(token): floored_logprob(columns.logprobs[position])}
    for top, value in zip(columns.top_ids[position * k : (position + 1) * k], columns.top_logprobs[position * k :]):
        listed.setdefault(str(top), floored_logprob(value))
    return listed
