"""The OpenAI-style inference endpoints (`/v1/models`, `/tokenize`, `/v1/chat/completions`, `/v1/completions`),
served on --inference-port and on the management port.

A request runs exactly as InferenceService.Generate runs one: the same admission (the PoC gate: 503 while a round
runs; the stream bound; shutdown), the same request registry (gRPC's Abort reaches it by its id), the same
translation and checks (server.translation), the same engine instances. The node's STOPPED mode answers 503, as
the deployed node's port does once its backends are down.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any, TypeVar

import pydantic
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from engine_ext.generation.outputs import FinishReason, GenerationStep
from engine_ext.model_facts import ModelFacts
from gonka.mlnode.v1 import inference_pb2 as pb
from server.core.errors import ServiceError
from server.core.instances import EngineInstance, EngineInstances
from server.core.request_registry import RequestRegistry
from server.http.errors import HttpError, http_error_of
from server.http.json_body import parse_body
from server.http.node_state import NodeState
from server.http.openai_models import ChatCompletionBody, CompletionBody, SamplingFields, TokenizeBody
from server.http.openai_responses import Kind, OpenAIAnswer
from server.http.openai_translation import chat_input, chat_request, completion_request, openai_error
from server.poc.gate.admission import Admission
from server.translation import GenerationPlan, RequestTranslator
from server.translation.engine_failures import engine_failure
from server.translation.prompt import PromptReader

Body = TypeVar("Body", bound=pydantic.BaseModel)


@dataclass(frozen=True)
class InferenceObjects:
    """What the inference endpoints drive: the objects InferenceService drives, and the node's mode."""

    node: NodeState
    instances: EngineInstances
    facts: ModelFacts
    translator: RequestTranslator
    prompts: PromptReader
    registry: RequestRegistry
    admission: Admission


def inference_router(objects: InferenceObjects) -> APIRouter:
    router = APIRouter()
    facts = objects.facts

    @router.get("/v1/models")
    async def models() -> dict[str, Any]:
        _require_serving(objects.node)
        served = objects.node.served
        card = {
            "id": served.name,
            "object": "model",
            "created": 0,
            "owned_by": "vllm",
            "root": served.path,
            "parent": None,
            "max_model_len": facts.max_model_len,
            "permission": [],
        }
        return {"object": "list", "data": [card]}

    @router.post("/tokenize")
    async def tokenize(request: Request) -> dict[str, Any]:
        body = await _read(TokenizeBody, request)
        _require_serving(objects.node)
        _require_model(objects.node, body.model)
        if (body.prompt is None) == (body.messages is None):
            raise HttpError(400, "BadRequestError", "give either prompt or messages", "prompt")
        if body.messages is not None:
            generate = pb.GenerateRequest(
                chat=chat_input(body.messages, body.add_generation_prompt, body.chat_template_kwargs)
            )
        else:
            generate = pb.GenerateRequest(text=body.prompt)
        try:
            ids = await objects.prompts.prompt_token_ids(generate)
        except ServiceError as error:
            raise openai_error(error) from None
        return {"count": len(ids), "max_model_len": facts.max_model_len, "tokens": ids, "token_strs": None}

    @router.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        body = await _read(ChatCompletionBody, request)
        top = (body.top_logprobs or 0) if body.logprobs else None
        return await _answer(objects, "chat", body, top, lambda request_id: chat_request(body, request_id, facts))

    @router.post("/v1/completions")
    async def completions(request: Request) -> Response:
        body = await _read(CompletionBody, request)
        return await _answer(
            objects, "completion", body, body.logprobs, lambda request_id: completion_request(body, request_id, facts)
        )

    return router


async def _answer(
    objects: InferenceObjects,
    kind: Kind,
    body: SamplingFields,
    top_logprobs: int | None,
    to_request: Callable[[str], pb.GenerateRequest],
) -> Response:
    _require_serving(objects.node)
    _require_model(objects.node, body.model)
    request_id = uuid.uuid4().hex
    generation = _generate(objects, to_request(request_id), request_id)
    # The plan first: every refusal (the gate, a bad field) is the answer's status, before any byte is sent.
    plan = await anext(generation)
    assert isinstance(plan, GenerationPlan)
    answer = OpenAIAnswer(
        kind,
        request_id,
        objects.node.served.name,
        plan.request.prompt_token_ids,
        body.n,
        top_logprobs,
        body.return_token_ids,
    )
    if not body.stream:
        async with aclosing(generation) as steps:
            async for step in steps:
                assert isinstance(step, GenerationStep)
                answer.add(step)
        return JSONResponse(answer.body())
    include_usage = body.stream_options is not None and bool(body.stream_options.include_usage)
    return StreamingResponse(_events(generation, answer, include_usage), media_type="text/event-stream")


async def _events(
    generation: AsyncGenerator[GenerationPlan | GenerationStep, None], answer: OpenAIAnswer, include_usage: bool
) -> AsyncIterator[str]:
    """Server-sent events as vLLM sends them: a failure once streaming is an `error` event, then `[DONE]`."""
    async with aclosing(generation) as steps:
        try:
            async for step in steps:
                assert isinstance(step, GenerationStep)
                for chunk in answer.add(step):
                    yield _event(chunk)
            if include_usage:
                yield _event(answer.usage_chunk())
        except ServiceError as error:
            refusal = http_error_of(openai_error(error))
            message = {"message": refusal.message, "type": refusal.error_type, "param": refusal.param}
            yield _event({"error": message | {"code": refusal.status}})
    yield "data: [DONE]\n\n"


async def _generate(
    objects: InferenceObjects, request: pb.GenerateRequest, request_id: str
) -> AsyncGenerator[GenerationPlan | GenerationStep, None]:
    """The plan, then the engine's steps: InferenceService.Generate's path, step for step."""
    admission = objects.admission
    gate_closings = admission.gate.closings
    plan: GenerationPlan | None = None
    instance: EngineInstance | None = None
    try:
        with admission.stream(), objects.registry.track(request_id):
            plan = await objects.translator.plan(request, request_id)
            yield plan
            with objects.instances.pick() as instance:
                async with aclosing(await instance.engine.generate(plan.request)) as steps:
                    async for step in steps:
                        yield step
                        if step.finished:
                            if _aborted(step) and admission.gate.closings != gate_closings:
                                # A mining round started while it ran, and aborted it.
                                raise admission.gate.preemption()
                            return
    except ServiceError as error:
        raise openai_error(error) from None
    except Exception as error:  # the engine's failures, classified as the gRPC service classifies them
        raise engine_failure(error, plan, admission, instance) from error


def _aborted(step: GenerationStep) -> bool:
    return any(delta.finish is not None and delta.finish.reason is FinishReason.ABORT for delta in step.outputs)


def _event(chunk: dict[str, Any]) -> str:
    return f"data: {json.dumps(chunk, separators=(',', ':'))}\n\n"


async def _read(model: type[Body], request: Request) -> Body:
    """vLLM's OpenAI server answers a body of the wrong shape with 400, not FastAPI's 422."""
    try:
        return parse_body(model, await request.body())
    except HttpError as error:
        raise HttpError(400, "BadRequestError", error.message, error.param) from None


def _require_serving(node: NodeState) -> None:
    if not node.serves_inference:
        raise HttpError(
            503,
            "ServiceUnavailableError",
            "the node is stopped (POST /api/v1/inference/up serves inference again)",
        )


def _require_model(node: NodeState, model: str | None) -> None:
    # vLLM's answer to a model it does not serve; no model: the served one.
    if model is not None and not node.served.is_named_by(model):
        raise HttpError(404, "NotFoundError", f"The model `{model}` does not exist.", "model")
