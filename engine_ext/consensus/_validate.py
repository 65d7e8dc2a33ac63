"""Argument checks shared by the consensus modules: each raises with a message naming the problem."""

from __future__ import annotations

import math


def require_int(name: str, value: object) -> int:
    # bool is an int subclass; a True nonce or count is always a caller bug.
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    return value


def require_int_at_least(name: str, value: object, minimum: int) -> int:
    number = require_int(name, value)
    if number < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {number}")
    return number


def require_finite(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"{name} must be finite, got {value}")
    return number


def require_str(name: str, value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__}")
    return value
