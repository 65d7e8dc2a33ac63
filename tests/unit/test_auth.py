"""Bearer-token authorization: which methods need the token, and the interceptor on a real grpc.aio
server (in process, no engine) with stand-in handlers, PocService's included before it exists."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2

from server.core.auth import AuthInterceptor, Authorizer, is_protected
from server.core.bearer_token import BearerToken, InvalidToken

TOKEN = "s3cret-Token_value.42"


@pytest.mark.parametrize(
    ("method", "protected"),
    [
        ("/gonka.mlnode.v1.InferenceService/Abort", True),
        ("/gonka.mlnode.v1.ValidationService/ValidateInference", True),
        ("/gonka.mlnode.v1.PocService/StartRound", True),
        ("/gonka.mlnode.v1.PocService/AMethodAddedLater", True),
        ("/gonka.mlnode.v1.InferenceService/Generate", False),
        ("/gonka.mlnode.v1.InferenceService/GetModelInfo", False),
        # Decided by the servicer once the request is decoded (include_engine_processes).
        ("/gonka.mlnode.v1.InferenceService/GetServerStatus", False),
        ("/grpc.health.v1.Health/Check", False),
        ("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", False),
        # A name that merely starts like a protected service's is not that service.
        ("/gonka.mlnode.v1.PocServiceExtra/StartRound", False),
    ],
)
def test_which_methods_need_the_token(method: str, protected: bool) -> None:
    assert is_protected(method) is protected


@pytest.mark.parametrize(
    ("metadata", "reason"),
    [
        ((), "AUTH_TOKEN_REQUIRED"),
        ((("x-other", "value"),), "AUTH_TOKEN_REQUIRED"),
        ((("authorization", "Bearer wrong"),), "AUTH_TOKEN_INVALID"),
        ((("authorization", f"Bearer {TOKEN}x"),), "AUTH_TOKEN_INVALID"),
        ((("authorization", TOKEN),), "AUTH_TOKEN_INVALID"),
        ((("authorization", f"Basic {TOKEN}"),), "AUTH_TOKEN_INVALID"),
        ((("authorization", f"Bearer {TOKEN}"), ("authorization", "Bearer other")), "AUTH_TOKEN_INVALID"),
        ((("authorization", f"Bearer {TOKEN}"),), None),
        ((("authorization", f"bearer  {TOKEN} "),), None),
    ],
)
def test_the_authorizer_names_why_it_refuses(metadata: tuple, reason: str | None) -> None:
    refusal = Authorizer(BearerToken(TOKEN)).refusal(metadata)
    assert (refusal and refusal.reason_name) == reason
    if refusal is not None:
        assert refusal.code == grpc.StatusCode.UNAUTHENTICATED
        assert TOKEN not in refusal.message


def test_without_a_token_everything_is_authorized() -> None:
    assert Authorizer(None).refusal(()) is None


@pytest.mark.parametrize("token", ["", "has space", "new\nline", "ünïcode"])
def test_a_token_that_cannot_travel_as_a_header_is_refused(token: str) -> None:
    with pytest.raises(InvalidToken) as refused:
        BearerToken(token)
    # The message says what is wrong, never what the token is.
    assert not token or token not in str(refused.value)


def test_the_token_is_never_printed() -> None:
    token = BearerToken(TOKEN)
    assert TOKEN not in repr(token) and TOKEN not in str(token)
    assert token.matches(TOKEN) and not token.matches(TOKEN[:-1])


async def _echo(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
    return request


async def _echo_stream(request: bytes, context: grpc.aio.ServicerContext) -> Any:
    yield request
    yield request


def _stand_in_handlers() -> list[grpc.GenericRpcHandler]:
    unary, stream = grpc.unary_unary_rpc_method_handler(_echo), grpc.unary_stream_rpc_method_handler(_echo_stream)
    return [
        grpc.method_handlers_generic_handler(
            "gonka.mlnode.v1.PocService", {"StartRound": unary, "SubscribeArtifacts": stream}
        ),
        grpc.method_handlers_generic_handler(
            "gonka.mlnode.v1.InferenceService", {"Abort": unary, "GetModelInfo": unary}
        ),
        grpc.method_handlers_generic_handler("grpc.health.v1.Health", {"Check": unary}),
    ]


def _reason(error: grpc.aio.AioRpcError) -> str:
    for key, value in error.trailing_metadata() or ():
        if key == "grpc-status-details-bin":
            info = error_details_pb2.ErrorInfo()
            status_pb2.Status.FromString(value).details[0].Unpack(info)
            return info.reason
    raise AssertionError("no ErrorInfo in the trailers")


async def _calls(port: int, metadata: tuple) -> dict[str, str]:
    """Each stand-in method's outcome: the echoed request, or the refusal's code and reason."""
    outcomes = {}
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        for method in ("PocService/StartRound", "InferenceService/Abort", "InferenceService/GetModelInfo"):
            try:
                outcomes[method] = (
                    await channel.unary_unary(f"/gonka.mlnode.v1.{method}")(b"hi", metadata=metadata)
                ).decode()
            except grpc.aio.AioRpcError as error:
                outcomes[method] = f"{error.code().name} {_reason(error)}"
        try:
            call = channel.unary_stream("/gonka.mlnode.v1.PocService/SubscribeArtifacts")(b"hi", metadata=metadata)
            outcomes["PocService/SubscribeArtifacts"] = ",".join([message.decode() async for message in call])
        except grpc.aio.AioRpcError as error:
            outcomes["PocService/SubscribeArtifacts"] = f"{error.code().name} {_reason(error)}"
        outcomes["Health/Check"] = (
            await channel.unary_unary("/grpc.health.v1.Health/Check")(b"ok", metadata=metadata)
        ).decode()
    return outcomes


def test_the_interceptor_refuses_protected_methods_of_either_shape_and_passes_the_rest() -> None:
    async def scenario() -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
        server = grpc.aio.server(interceptors=(AuthInterceptor(Authorizer(BearerToken(TOKEN))),))
        server.add_generic_rpc_handlers(_stand_in_handlers())
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            return (
                await _calls(port, ()),
                await _calls(port, (("authorization", "Bearer nope"),)),
                await _calls(port, (("authorization", f"Bearer {TOKEN}"),)),
            )
        finally:
            await server.stop(0)

    missing, wrong, right = asyncio.run(scenario())
    refused = {"PocService/StartRound", "PocService/SubscribeArtifacts", "InferenceService/Abort"}
    assert {
        method for method, outcome in missing.items() if outcome == "UNAUTHENTICATED AUTH_TOKEN_REQUIRED"
    } == refused
    assert {method for method, outcome in wrong.items() if outcome == "UNAUTHENTICATED AUTH_TOKEN_INVALID"} == refused
    assert missing["InferenceService/GetModelInfo"] == wrong["InferenceService/GetModelInfo"] == "hi"
    assert missing["Health/Check"] == "ok"
    assert right == {
        "PocService/StartRound": "hi",
        "InferenceService/Abort": "hi",
        "InferenceService/GetModelInfo": "hi",
        "PocService/SubscribeArtifacts": "hi,hi",
        "Health/Check": "ok",
    }
