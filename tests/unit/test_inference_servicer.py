"""The servicer's own duties, with a stand-in engine for states the real one cannot be driven into:
a stream left outside the engine's generator aborts the engine request at once, and errors map to
the status a client can act on (client errors INVALID_ARGUMENT, everything else INTERNAL)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from engine_ext.consensus.logprobs_mode import DEFAULT_MODE
from engine_ext.engine_calls import EngineCalls
from engine_ext.generation.errors import RequestFailed, RequestRejected
from engine_ext.generation.generation_request import GenerationRequest
from engine_ext.generation.outputs import GenerationStep, OutputDelta
from engine_ext.model_facts import ModelFacts
from gonka.mlnode.client import build_request
from server.core.auth import Authorizer
from server.core.errors import ServiceError
from server.core.instances import EngineInstance, EngineInstances
from server.core.request_registry import RequestRegistry
from server.poc.gate.admission import Admission
from server.services.inference_servicer import InferenceServicer
from server.translation import RequestTranslator
from server.translation.engine_failures import engine_failure as server_failure
from server.translation.prompt import PromptLimits, PromptReader

FACTS = ModelFacts(
    served_model_name="tiny",
    model_path="/m",
    max_model_len=64,
    vocab_size=151936,
    tokenizer_max_token_id=151668,
    eos_token_id=151645,
    bos_token_id=None,
    dtype="bfloat16",
    max_logprobs=20,
    tensor_parallel_size=1,
    has_chat_template=False,
)


class StandInEngine:
    """Yields one token per step until closed, or raises `failure` before its first step."""

    def __init__(self, failure: Exception | None = None) -> None:
        self.failure = failure
        self.closed: list[str] = []
        self.calls = EngineCalls(1.0, 5.0)
        self.errored = False
        self.default_logprobs_mode = DEFAULT_MODE

    async def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationStep]:
        if self.failure is not None:
            raise self.failure
        return self._steps(request)

    async def _steps(self, request: GenerationRequest) -> AsyncIterator[GenerationStep]:
        try:
            while True:
                yield GenerationStep([OutputDelta(0, [7], None, "", None)], False)
        finally:
            self.closed.append(request.request_id)  # where the real engine aborts the request

    async def abort(self, request_ids: Any) -> None:
        pass


class Aborted(Exception):
    pass


class StandInContext:
    async def abort(self, code: grpc.StatusCode, message: str, trailing_metadata: Any = ()) -> None:
        raise Aborted(code, message)


def servicer(engine: StandInEngine) -> InferenceServicer:
    limits = PromptLimits(max_chars=100, template_variables=frozenset())
    translator = RequestTranslator(FACTS, PromptReader(FACTS, limits, tokenizers=None))
    instances = EngineInstances([EngineInstance(0, engine, runner=None)])
    return InferenceServicer(
        instances,
        FACTS,
        limits,
        1 << 20,
        translator,
        RequestRegistry(),
        Admission(),
        versions=None,
        authorizer=Authorizer(None),
    )


def raw_request(**kwargs: Any) -> bytes:
    return build_request(token_ids=[1, 2, 3], max_tokens=50, **kwargs).SerializeToString()


def test_a_stream_left_after_its_first_message_closes_the_engine_request_at_once() -> None:
    async def scenario() -> list[str]:
        engine = StandInEngine()
        stream = servicer(engine).Generate(raw_request(request_id="left"), StandInContext())
        first = await stream.__anext__()
        assert list(first.tokens.ids) == [7]
        await stream.aclose()  # what grpc does when the client goes away between two messages
        return list(engine.closed)  # read before the event loop runs anything else

    assert asyncio.run(scenario()) == ["left"]


def engine_failure(failure: Exception) -> tuple[grpc.StatusCode, str]:
    async def scenario() -> tuple[grpc.StatusCode, str]:
        stream = servicer(StandInEngine(failure)).Generate(raw_request(), StandInContext())
        with pytest.raises(Aborted) as caught:
            await stream.__anext__()
        return caught.value.args

    return asyncio.run(scenario())


def test_a_rejection_by_the_engine_is_invalid_argument() -> None:
    code, message = engine_failure(RequestRejected("top_k must be -1 or at least 1", part="sampling"))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and message.startswith("sampling:")


def test_a_value_error_from_a_server_bug_is_internal_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="server.translation.engine_failures"):
        code, message = engine_failure(ValueError("a bug, not the client's"))
    assert code == grpc.StatusCode.INTERNAL and "a bug" in message
    assert any(record.exc_info for record in caplog.records)  # the traceback is in the log


def test_an_engine_failure_is_internal_without_promising_a_retry() -> None:
    code, message = engine_failure(RequestFailed("the engine failed the request: RuntimeError('boom')"))
    assert code == grpc.StatusCode.INTERNAL and "retry" not in message.lower()


def test_undecodable_bytes_are_invalid_argument_naming_the_problem() -> None:
    async def scenario() -> tuple[grpc.StatusCode, str]:
        stream = servicer(StandInEngine()).Generate(b"\x0a\xff\xff", StandInContext())
        with pytest.raises(Aborted) as caught:
            await stream.__anext__()
        return caught.value.args

    code, message = asyncio.run(scenario())
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "gonka.mlnode.v1.GenerateRequest" in message


def test_service_errors_pass_through_unchanged() -> None:
    error = ServiceError(grpc.StatusCode.UNAVAILABLE, 7, "going down")
    assert server_failure(error, None, Admission()) is error
