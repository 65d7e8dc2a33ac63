"""Swapping one method of chosen objects for the duration of a block (the compiled PoC forward's stand-ins).

An instance attribute shadows the class's method of the same name, so only the chosen objects change, and
removing it restores the class's method exactly: nothing of vLLM's is rebound or wrapped.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any


@contextlib.contextmanager
def shadowed_method(name: str, stand_ins: Sequence[tuple[Any, Any]]) -> Iterator[None]:
    """(target, stand-in) pairs, made once by the caller: each target's `name` is its stand-in's `name` until the
    block ends, then the class's again (also when the block raises)."""
    try:
        for target, stand_in in stand_ins:
            setattr(target, name, getattr(stand_in, name))
        yield
    finally:
        for target, _ in stand_ins:
            target.__dict__.pop(name, None)
