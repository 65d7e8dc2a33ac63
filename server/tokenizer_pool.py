"""Tokenization and chat-template rendering off the event loop.

Both are CPU work of one request that can take seconds (a long text, a slow template); on the
event loop they would stall every stream and the health checks. They run here on a few worker
threads instead: the fast tokenizer's Rust core releases the GIL while it encodes, and Python-level
template rendering yields it every few milliseconds. Each thread has its own copy of the
tokenizer, since a Hugging Face fast tokenizer is not safe to share between threads.
"""

from __future__ import annotations

import asyncio
import copy
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")
DEFAULT_WORKERS = 2


class TokenizerPool:
    def __init__(self, tokenizer: Any, workers: int = DEFAULT_WORKERS) -> None:
        self._original = tokenizer
        self._per_thread = threading.local()
        self._executor = ThreadPoolExecutor(workers, thread_name_prefix="tokenizer")

    async def encode(self, text: str) -> list[int]:
        return await self._run(lambda tokenizer: list(tokenizer.encode(text)))

    async def render_chat(self, messages: Sequence[Mapping[str, str]], add_generation_prompt: bool, variables: Mapping[str, Any]) -> list[int]:
        """The served chat template applied to `messages`, tokenized. Raises whatever the template
        raises on messages it rejects."""

        def render(tokenizer: Any) -> list[int]:
            ids = tokenizer.apply_chat_template(list(messages), add_generation_prompt=add_generation_prompt, tokenize=True, **variables)
            return list(ids)

        return await self._run(render)

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def _run(self, work: Callable[[Any], T]) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, lambda: work(self._thread_tokenizer()))

    def _thread_tokenizer(self) -> Any:
        tokenizer = getattr(self._per_thread, "tokenizer", None)
        if tokenizer is None:
            tokenizer = self._per_thread.tokenizer = copy.deepcopy(self._original)
        return tokenizer
