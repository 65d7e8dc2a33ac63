"""The control RPCs' bearer token: matched in constant time, never printed."""

from __future__ import annotations

import hashlib
import hmac

# What may follow "Bearer " in an HTTP/2 header value: visible ASCII, no spaces.
TOKEN_CHARACTERS = frozenset(chr(code) for code in range(0x21, 0x7F))


class InvalidToken(ValueError):
    """The configured token cannot be sent as `authorization: Bearer <token>` (the message omits it)."""


class BearerToken:
    def __init__(self, token: str) -> None:
        if not token:
            raise InvalidToken("the token is empty")
        if not set(token) <= TOKEN_CHARACTERS:
            raise InvalidToken("the token may hold only visible ASCII characters (no spaces or control characters)")
        # Digests of equal length: compare_digest then reveals neither the token's content nor its length.
        self._digest = _digest(token)

    def matches(self, presented: str) -> bool:
        return hmac.compare_digest(self._digest, _digest(presented))

    def __repr__(self) -> str:
        return "BearerToken(<redacted>)"


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()
