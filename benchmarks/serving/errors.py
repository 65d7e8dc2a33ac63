"""The one failure the benchmark reports: a server that misbehaved."""

from __future__ import annotations


class BenchmarkError(RuntimeError):
    """A server misbehaved (a stream short of tokens, a wrong prompt length, an RPC error)."""
