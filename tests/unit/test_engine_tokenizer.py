"""MlnodeEngine.tokenizer_is_thread_safe on the tokenizers vLLM serves with (the server shares a safe one across its
tokenization threads instead of copying it: server.translation.tokenizer_pool)."""

from __future__ import annotations

import copy
from types import SimpleNamespace
from typing import Any

from vllm.tokenizers.hf import get_cached_tokenizer, maybe_make_thread_pool

from engine_ext.engine import MlnodeEngine


def is_thread_safe(tokenizer: Any) -> bool:
    # The method reads nothing but the engine's tokenizer.
    return MlnodeEngine.tokenizer_is_thread_safe(SimpleNamespace(tokenizer=lambda: tokenizer))  # type: ignore[arg-type]


def test_vllms_tokenizer_is_the_thread_safe_kind(tokenizer: Any) -> None:
    assert is_thread_safe(maybe_make_thread_pool(get_cached_tokenizer(copy.copy(tokenizer))))


def test_a_plain_hugging_face_tokenizer_is_not(tokenizer: Any) -> None:
    assert not is_thread_safe(tokenizer)
