"""Bearer-token authorization of the control RPCs (`authorization: Bearer <token>` metadata).

With a token configured (--auth-token-file or MLNODE_AUTH_TOKEN), these need it:
- every method of ValidationService and of PocService, matched by service name, so that a method
  added later is covered without a change here;
- InferenceService.Abort;
- InferenceService.GetServerStatus with include_engine_processes. That depends on the request, and
  the interceptor sees the call before its request is decoded (the servicers decode their own
  bytes, server.core.service_registration), so the servicer asks the Authorizer once it has decoded it.
Open: Generate, GetModelInfo, GetServerStatus without engine processes, grpc.health.v1 and reflection
(health checkers and `grpcurl list` hold no secret). Without a token every RPC is open.

A refused call ends with UNAUTHENTICATED, reason AUTH_TOKEN_REQUIRED (no `authorization` metadata) or
AUTH_TOKEN_INVALID, before its handler runs. Neither the error nor the log repeats what was sent.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import grpc

from server.core.bearer_token import BearerToken
from server.core.errors import Reason, ServiceError, abort_with
from server.core.refusing_handler import refusing_handler

log = logging.getLogger(__name__)

AUTHORIZATION_KEY = "authorization"
BEARER_SCHEME = "bearer"
# Names, not descriptors: PocService is covered from the moment it is registered.
PROTECTED_SERVICES = frozenset({"gonka.mlnode.v1.ValidationService", "gonka.mlnode.v1.PocService"})
PROTECTED_METHODS = frozenset({"/gonka.mlnode.v1.InferenceService/Abort"})

Metadata = Iterable[tuple[str, str | bytes]]


def is_protected(method: str) -> bool:
    """`method` as gRPC names it: `/package.Service/Method`."""
    return method in PROTECTED_METHODS or method.lstrip("/").partition("/")[0] in PROTECTED_SERVICES


class Authorizer:
    def __init__(self, token: BearerToken | None) -> None:
        """`token` None: no token is configured and every call is authorized."""
        self._token = token

    def refusal(self, metadata: Metadata | None) -> ServiceError | None:
        """Why a call with this metadata is refused, or None when it may proceed."""
        if self._token is None:
            return None
        values = [value for key, value in metadata or () if key == AUTHORIZATION_KEY]
        if not values:
            return ServiceError(
                grpc.StatusCode.UNAUTHENTICATED,
                Reason.AUTH_TOKEN_REQUIRED,
                "this RPC needs the server's token as `authorization: Bearer <token>` metadata",
            )
        scheme, _, presented = str(values[0]).strip().partition(" ")
        if len(values) > 1 or scheme.lower() != BEARER_SCHEME or not self._token.matches(presented.strip()):
            return ServiceError(
                grpc.StatusCode.UNAUTHENTICATED,
                Reason.AUTH_TOKEN_INVALID,
                "the `authorization` metadata is not `Bearer <token>` with the server's token",
            )
        return None

    async def require(self, context: grpc.aio.ServicerContext, what: str) -> None:
        """Ends the call (raises, as grpc.aio's abort does) unless it carries the token; `what` names
        the call in the log."""
        refusal = self.refusal(context.invocation_metadata())
        if refusal is not None:
            _log_refusal(what, refusal)
            await abort_with(context, refusal)


class AuthInterceptor(grpc.aio.ServerInterceptor):
    """Refuses protected methods' calls without the token; every other call passes untouched."""

    def __init__(self, authorizer: Authorizer) -> None:
        self._authorizer = authorizer

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any] | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        handler = await continuation(handler_call_details)
        if handler is None or not is_protected(handler_call_details.method):
            return handler
        refusal = self._authorizer.refusal(handler_call_details.invocation_metadata)
        if refusal is None:
            return handler
        _log_refusal(handler_call_details.method, refusal)
        return refusing_handler(handler, refusal)


def _log_refusal(what: str, refusal: ServiceError) -> None:
    log.warning("refused %s: %s", what, refusal.reason_name)
