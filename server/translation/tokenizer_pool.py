"""Tokenization and chat-template rendering off the event loop.

Both are CPU work of one request that can take seconds (a long text, a slow template); on the
event loop they would stall every stream and the health checks. They run here on a few worker
threads instead: the fast tokenizer's Rust core releases the GIL while it encodes, and Python-level
template rendering yields it every few milliseconds.

A Hugging Face fast tokenizer's Python methods are not safe to share between threads (a call may
change its truncation settings under another). vLLM's own tokenizer is made safe (each public call
borrows one of vLLM's copies, made as the engine starts): the threads share it, and its Rust core,
whose encoding calls only read it. Any other tokenizer is copied once per thread, before serving,
since a copy holds the GIL for most of a second (several on a busy machine). Deep-copying vLLM's
safe tokenizer instead would copy its copies too: 2.5 s of a server's start each on a busy 2-core host.
"""

from __future__ import annotations

import asyncio
import copy
import queue
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")
DEFAULT_WORKERS = 2
# Texts up to this long are encoded whole (their encoding drops in tens of milliseconds).
WHOLE_TEXT_CHARS = 1_000_000
PIECE_CHARS = 200_000
BOUNDARY_SLACK_TOKENS = 2


class TokenizerPool:
    def __init__(self, tokenizer: Any, workers: int = DEFAULT_WORKERS, thread_safe: bool = False) -> None:
        """`thread_safe`: the tokenizer's public methods may be called from several threads at once (vLLM's)."""
        self._copies: queue.SimpleQueue[Any] = queue.SimpleQueue()
        for _ in range(workers):
            self._copies.put(tokenizer if thread_safe else copy.deepcopy(tokenizer))
        self._per_thread = threading.local()
        # The executor starts at most `workers` threads, each taking one copy as it starts.
        self._executor = ThreadPoolExecutor(workers, thread_name_prefix="tokenizer", initializer=self._take_a_copy)

    async def encode(self, text: str, max_tokens: int) -> list[int] | int:
        """The text's token ids; only (at least) their count when there are more than `max_tokens`.

        A fast tokenizer's Rust core is called directly (its batch call encodes without the GIL).
        What holds the GIL is per token: building the list of ids, and dropping the encoding (about
        0.08 µs a token, 360 ms for a 10 MB text). So a text too long to serve is found out in
        pieces, each dropped on its own, and only a text that may fit is encoded whole."""
        return await self._run(lambda tokenizer: _encode(tokenizer, text, max_tokens))

    async def render_chat(
        self, messages: Sequence[Mapping[str, str]], add_generation_prompt: bool, variables: Mapping[str, Any]
    ) -> list[int]:
        """The served chat template applied to `messages`, tokenized. Raises whatever the template
        raises on messages it rejects."""

        def render(tokenizer: Any) -> list[int]:
            # return_dict=False: transformers 5 returns an encoding dict by default, 4 a list.
            ids = tokenizer.apply_chat_template(
                list(messages),
                add_generation_prompt=add_generation_prompt,
                tokenize=True,
                return_dict=False,
                **variables,
            )
            return list(ids)

        return await self._run(render)

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def _run(self, work: Callable[[Any], T]) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, lambda: work(self._per_thread.tokenizer))

    def _take_a_copy(self) -> None:
        self._per_thread.tokenizer = self._copies.get_nowait()


def _encode(tokenizer: Any, text: str, max_tokens: int) -> list[int] | int:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:  # a slow (Python) tokenizer: nothing to gain below
        ids = list(tokenizer.encode(text))
        return ids if len(ids) <= max_tokens else len(ids)
    if len(text) > WHOLE_TEXT_CHARS:
        pieces, tokens = _count_in_pieces(backend, text)
        # A cut between two pieces can change the tokens next to it, never by more than a couple.
        if tokens - BOUNDARY_SLACK_TOKENS * (pieces - 1) > max_tokens:
            return tokens
    (encoding,) = backend.encode_batch([text], add_special_tokens=True)
    return encoding.ids if len(encoding) <= max_tokens else len(encoding)


def _count_in_pieces(backend: Any, text: str) -> tuple[int, int]:
    """(pieces, tokens) of the text cut before spaces into pieces of about PIECE_CHARS."""
    pieces = tokens = 0
    start = 0
    while start < len(text):
        end = min(start + PIECE_CHARS, len(text))
        if end < len(text):
            space = text.rfind(" ", start + 1, end)
            end = space if space > start else end
        (encoding,) = backend.encode_batch([text[start:end]], add_special_tokens=False)
        tokens += len(encoding)
        pieces += 1
        start = end
    return pieces, tokens
