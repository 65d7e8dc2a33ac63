"""The engine wrapper's errors: what callers outside engine_ext can catch, with no vLLM types."""

from __future__ import annotations

import asyncio


class EngineError(Exception):
    """Base of everything the engine wrapper raises on purpose."""


class EngineDead(EngineError):
    """The engine's processes are gone; nothing more will be served."""


class RequestRejected(EngineError):
    """The engine's own input validation refused the request: the client's fault, not the server's.

    `part` says what was refused, so the caller can name the field: "sampling" (the sampling
    options), "constraint" (vLLM compiles a structured-output constraint while validating a
    request that has one), "logprobs_mode" (the mode asked for cannot be served) or "request"
    (anything else)."""

    def __init__(self, message: str, part: str) -> None:
        super().__init__(message)
        self.message = message
        self.part = part


class RequestFailed(EngineError):
    """The engine failed the request after accepting it (a server-side fault)."""


class EnginePaused(EngineError):
    """The engine takes no new requests until it is resumed."""


class EngineCallTimeout(EngineError):
    """A call into the engine did not answer in time; it may still answer later.

    `answered`: the call itself, done once the engine has answered it after all (its result is then of no
    use), for a caller that must not go on while the engine still runs it (a mining round keeps inference
    out until its last PoC forward is over): `await asyncio.wait({error.answered})`."""

    def __init__(self, name: str, timeout_seconds: float, answered: asyncio.Future | None = None) -> None:
        super().__init__(f"the engine did not answer {name} within {timeout_seconds:g} s")
        self.name = name
        self.timeout_seconds = timeout_seconds
        self.answered = answered
