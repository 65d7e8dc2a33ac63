"""gonka.mlnode.v1.InferenceService: streams vLLM generations as columnar token batches."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator

import grpc
from vllm.inputs import TokensPrompt
from vllm.v1.engine.exceptions import EngineDeadError, EngineGenerateError

from engine_ext.engine import MlnodeEngine
from gonka.mlnode.v1 import inference_pb2 as pb
from gonka.mlnode.v1 import inference_pb2_grpc as pb_grpc
from server.admission import Admission
from server.errors import Reason, ServiceError, abort_with, invalid_field
from server.model_facts import ModelFacts
from server.request_registry import RequestRegistry
from server.response_encoding import ResponseEncoder
from server.translation import GenerationPlan, RequestTranslator

log = logging.getLogger(__name__)


class InferenceServicer(pb_grpc.InferenceServiceServicer):
    def __init__(
        self,
        engine: MlnodeEngine,
        facts: ModelFacts,
        translator: RequestTranslator,
        registry: RequestRegistry,
        admission: Admission,
        versions: pb.Versions,
    ) -> None:
        self._engine = engine
        self._facts = facts
        self._translator = translator
        self._registry = registry
        self._admission = admission
        self._versions = versions
        self._started = time.monotonic()

    async def Generate(
        self, request: pb.GenerateRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.GenerateResponse]:
        # Errors are collected and raised after the try: grpc.aio's abort works by raising, and a
        # broad except here must not swallow it. Cancellation (client gone, deadline) is not caught:
        # it propagates into vLLM's generate(), which aborts the engine request.
        failure: ServiceError | None = None
        plan: GenerationPlan | None = None
        try:
            self._admission.require_open()
            plan = self._translator.plan(request)
            request_id = request.request_id or uuid.uuid4().hex
            with self._registry.track(request_id) as entry:
                encoder = ResponseEncoder(request_id, plan)
                prompt = TokensPrompt(prompt_token_ids=plan.prompt_token_ids)
                async for output in self._engine.generate(prompt, plan.sampling_params, request_id):
                    for message in encoder.encode(output):
                        yield message
                    if output.finished:
                        break
                    if entry.abort_requested:
                        await self._engine.abort([request_id])
                    elif plan.coalesce_seconds:
                        # Outputs arriving meanwhile are merged into the next one, on both paths.
                        await asyncio.sleep(plan.coalesce_seconds)
        except ServiceError as error:
            failure = error
        except ValueError as error:
            failure = _engine_rejection(error, plan)
        except EngineDeadError:
            failure = ServiceError(grpc.StatusCode.UNAVAILABLE, Reason.ENGINE_DEAD, "the engine has died; the server is going down")
        except EngineGenerateError as error:
            failure = ServiceError(grpc.StatusCode.INTERNAL, Reason.INTERNAL_ERROR, f"the engine failed the request: {error.__cause__!r}")
        except Exception as error:  # never leave a stream without a status
            log.exception("Generate failed")
            failure = ServiceError(grpc.StatusCode.INTERNAL, Reason.INTERNAL_ERROR, f"internal error: {error!r}")
        if failure is not None:
            await abort_with(context, failure)

    async def Abort(self, request: pb.AbortRequest, context: grpc.aio.ServicerContext) -> pb.AbortResponse:
        entry = self._registry.get(request.request_id)
        if entry is None:
            await abort_with(
                context,
                ServiceError(
                    grpc.StatusCode.NOT_FOUND,
                    Reason.REQUEST_NOT_FOUND,
                    f"request_id: no active request {request.request_id!r}",
                    field="request_id",
                ),
            )
        entry.abort_requested = True
        await self._engine.abort([request.request_id])
        return pb.AbortResponse()

    async def GetModelInfo(self, request: pb.GetModelInfoRequest, context: grpc.aio.ServicerContext) -> pb.GetModelInfoResponse:
        facts = self._facts
        return pb.GetModelInfoResponse(
            served_model_name=facts.served_model_name,
            model_path=facts.model_path,
            max_context_length=facts.max_model_len,
            vocab_size=facts.vocab_size,
            eos_token_id=facts.eos_token_id,
            bos_token_id=facts.bos_token_id,
            dtype=facts.dtype,
            max_logprobs=facts.max_logprobs,
            tensor_parallel_size=facts.tensor_parallel_size,
            has_chat_template=facts.has_chat_template,
            tokenizer_max_token_id=facts.tokenizer_max_token_id,
        )

    async def GetServerStatus(
        self, request: pb.GetServerStatusRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetServerStatusResponse:
        try:
            state = await self._engine.scheduler_state()
        except EngineDeadError:
            await abort_with(context, ServiceError(grpc.StatusCode.UNAVAILABLE, Reason.ENGINE_DEAD, "the engine has died"))
        response = pb.GetServerStatusResponse(
            running_requests=state.running,
            waiting_requests=state.waiting,
            kv_cache_usage=state.kv_cache_usage,
            active_streams=len(self._registry),
            uptime_seconds=time.monotonic() - self._started,
            versions=self._versions,
        )
        if request.include_engine_processes:
            response.engine_processes.append(_engine_process(pb.EngineProcess.ROLE_ENGINE_CORE, await self._engine.engine_core_report()))
            for report in await self._engine.worker_reports():
                response.engine_processes.append(_engine_process(pb.EngineProcess.ROLE_WORKER, report))
        return response


def _engine_process(role: int, report: dict) -> pb.EngineProcess:
    return pb.EngineProcess(role=role, pid=report["pid"], vllm_version=report["vllm_version"], seams=report["seams"])


def _engine_rejection(error: ValueError, plan: GenerationPlan | None) -> ServiceError:
    """vLLM's own input validation failed: the checks before it cover everything but the constraint."""
    if plan is not None and plan.constraint_field is not None:
        return invalid_field(plan.constraint_field, f"the engine rejected the constraint: {error}", Reason.INVALID_CONSTRAINT)
    return invalid_field("request", f"the engine rejected the request: {error}")
