"""The optional `/{mlnode_version}` path prefix (spec section 0): the API node addresses a node as
`http://host:port/v3.0.8/api/v1/...` once the chain names a version. A first path segment that reads as a version
is dropped when what follows it is one of the application's own paths; every other path is left as it is (so
`/v1/models` stays the OpenAI path, and `/v1/v1/models` is it under the prefix `v1`)."""

from __future__ import annotations

import re
from collections.abc import Iterable

from starlette.types import ASGIApp, Receive, Scope, Send

# v3.0.8, 3.1.0, v2, v3.0.14-rc1: what the API node's nodes and tests put there.
VERSION_SEGMENT = re.compile(r"v?\d+(\.\d+)*([-+][0-9A-Za-z.-]+)?")


class VersionPrefix:
    def __init__(self, app: ASGIApp, paths: Iterable[str]) -> None:
        """`paths`: the application's route paths; their first segments are what may follow a prefix."""
        self._app = app
        self._roots = frozenset(_first_segment(path) for path in paths)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            scope = self._unprefixed(scope)
        await self._app(scope, receive, send)

    def _unprefixed(self, scope: Scope) -> Scope:
        path: str = scope["path"]
        prefix, _, rest = path.lstrip("/").partition("/")
        if not rest or not VERSION_SEGMENT.fullmatch(prefix) or _first_segment(rest) not in self._roots:
            return scope
        cut = len(prefix) + 1
        raw_path: bytes = scope.get("raw_path") or path.encode()
        return {**scope, "path": path[cut:], "raw_path": raw_path[cut:]}


def _first_segment(path: str) -> str:
    return path.lstrip("/").split("/", 1)[0]
