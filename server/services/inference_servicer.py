"""gonka.mlnode.v1.InferenceService: streams the engine's generations as columnar token batches.

Methods take the raw request bytes (server.core.service_registration) so that undecodable input is
INVALID_ARGUMENT like any other bad input.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

import grpc

from engine_ext.generation.errors import EngineDead
from engine_ext.generation.outputs import FinishReason, GenerationStep
from engine_ext.model_facts import ModelFacts
from gonka.mlnode import contract
from gonka.mlnode.v1 import inference_pb2 as pb
from server.core.auth import Authorizer
from server.core.errors import Reason, ServiceError, abort_with, echoed
from server.core.instances import EngineInstance, EngineInstances, InstanceState
from server.core.request_registry import RequestRegistry
from server.core.service_registration import decode_request
from server.poc.gate.admission import Admission
from server.services.response_encoding import ResponseEncoder
from server.translation import GenerationPlan, RequestTranslator
from server.translation.engine_failures import engine_failure
from server.translation.prompt import PromptLimits


class InferenceServicer:
    def __init__(
        self,
        instances: EngineInstances,
        facts: ModelFacts,
        limits: PromptLimits,
        max_request_bytes: int,
        translator: RequestTranslator,
        registry: RequestRegistry,
        admission: Admission,
        versions: pb.Versions,
        authorizer: Authorizer,
    ) -> None:
        self._instances = instances
        self._facts = facts
        self._limits = limits
        self._max_request_bytes = max_request_bytes
        self._translator = translator
        self._registry = registry
        self._admission = admission
        self._versions = versions
        self._authorizer = authorizer
        self._started = time.monotonic()

    async def Generate(self, raw: bytes, context: grpc.aio.ServicerContext) -> AsyncIterator[pb.GenerateResponse]:
        # Errors are collected and raised after the try: grpc.aio's abort works by raising, and a
        # broad except here must not swallow it. Cancellation (client gone, deadline) is not caught:
        # it propagates into the engine's generator, which aborts the engine request.
        failure: ServiceError | None = None
        plan: GenerationPlan | None = None
        instance: EngineInstance | None = None
        try:
            request = decode_request(pb.GenerateRequest, raw)
            gate_closings = self._admission.gate.closings
            request_id = request.request_id or uuid.uuid4().hex
            with self._admission.stream(), self._registry.track(request_id) as entry:
                plan = await self._translator.plan(request, request_id)
                with self._instances.pick() as instance:
                    engine = entry.engine = instance.engine
                    encoder = ResponseEncoder(request_id, plan, engine.default_logprobs_mode)
                    # aclosing: however this loop is left, the engine request is aborted at once, not
                    # whenever the abandoned generator is collected.
                    async with aclosing(await engine.generate(plan.request)) as steps:
                        async for step in steps:
                            for message in encoder.encode(step):
                                yield message
                            if step.finished:
                                if (
                                    _aborted(step)
                                    and not entry.abort_requested
                                    and self._admission.gate.closings != gate_closings
                                ):
                                    # A mining round started while it ran, and aborted it.
                                    failure = self._admission.gate.preemption()
                                break
                            if entry.abort_requested:
                                await engine.abort([request_id])
                            elif plan.coalesce_seconds:
                                # Outputs arriving meanwhile are merged into the next one, on both paths.
                                await asyncio.sleep(plan.coalesce_seconds)
        except ServiceError as error:
            failure = error
        except Exception as error:  # never leave a stream without a status
            failure = engine_failure(error, plan, self._admission, instance)
        if failure is not None:
            await abort_with(context, failure)

    async def Abort(self, raw: bytes, context: grpc.aio.ServicerContext) -> pb.AbortResponse:
        request = await self._decoded(pb.AbortRequest, raw, context)
        entry = self._registry.get(request.request_id)
        if entry is None:
            await abort_with(
                context,
                ServiceError(
                    grpc.StatusCode.NOT_FOUND,
                    Reason.REQUEST_NOT_FOUND,
                    f"request_id: no active request {echoed(request.request_id)}",
                    field="request_id",
                ),
            )
        entry.abort_requested = True
        # Not sent to an engine yet (still being tokenized): the stream aborts it once it is.
        if entry.engine is not None:
            await entry.engine.abort([request.request_id])
        return pb.AbortResponse()

    async def GetModelInfo(self, raw: bytes, context: grpc.aio.ServicerContext) -> pb.GetModelInfoResponse:
        await self._decoded(pb.GetModelInfoRequest, raw, context)
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
            max_prompt_chars=self._limits.max_chars,
            max_request_bytes=self._max_request_bytes,
            template_variables=sorted(self._limits.template_variables),
        )

    async def GetServerStatus(self, raw: bytes, context: grpc.aio.ServicerContext) -> pb.GetServerStatusResponse:
        request = await self._decoded(pb.GetServerStatusRequest, raw, context)
        if request.include_engine_processes:
            # Pids, versions and seams of the engine processes describe the host: a control RPC's
            # answer (server.core.auth). Only the decoded request tells, hence here and not in the interceptor.
            await self._authorizer.require(context, "GetServerStatus with include_engine_processes")
        response = pb.GetServerStatusResponse(
            active_streams=len(self._registry),
            uptime_seconds=time.monotonic() - self._started,
            versions=self._versions,
            contract_revision=contract.REVISION,
            contract_digest=contract.DIGEST,
            inference_gate_closed=self._admission.gate.closed,
            poc_round_id=self._admission.gate.round_id or "",
        )
        # Every instance at once: one stuck or slow engine delays the answer by its own call only.
        reports = await asyncio.gather(
            *(_instance_report(instance, request.include_engine_processes) for instance in self._instances),
            return_exceptions=True,
        )
        if len(reports) == 1 and isinstance(reports[0], Exception):
            # One engine: its failure is the answer's (an instance of several is reported in its entry instead).
            await abort_with(context, engine_failure(reports[0], None, self._admission, self._instances.first))
        answered = []
        for instance, outcome in zip(self._instances, reports):
            report = (
                InstanceReport(_instance_entry(instance, problem=str(outcome) or repr(outcome)))
                if isinstance(outcome, BaseException)
                else outcome
            )
            response.instances.append(report.entry)
            response.engine_processes.extend(report.processes)
            if report.entry.HasField("running_requests"):
                answered.append(report.entry)
        if answered:
            response.running_requests = sum(entry.running_requests for entry in answered)
            response.waiting_requests = sum(entry.waiting_requests for entry in answered)
            response.kv_cache_usage = sum(entry.kv_cache_usage for entry in answered) / len(answered)
        else:
            # No engine answers: why (with one instance, exactly as before there were instances).
            problems = [entry.engine_problem for entry in response.instances if entry.engine_problem]
            response.engine_problem = (
                problems[0]
                if len(self._instances) == 1 and problems
                else "; ".join(
                    f"instance {entry.index}: {entry.engine_problem}"
                    for entry in response.instances
                    if entry.engine_problem
                )
            )
        return response

    async def _decoded(self, message_class: Any, raw: bytes, context: grpc.aio.ServicerContext) -> Any:
        try:
            return decode_request(message_class, raw)
        except ServiceError as error:
            await abort_with(context, error)


def _aborted(step: GenerationStep) -> bool:
    return any(delta.finish is not None and delta.finish.reason is FinishReason.ABORT for delta in step.outputs)


@dataclass
class InstanceReport:
    entry: pb.InstanceStatus
    processes: list[pb.EngineProcess] = field(default_factory=list)


INSTANCE_STATES = {
    InstanceState.SERVING: pb.InstanceStatus.STATE_SERVING,
    InstanceState.STUCK: pb.InstanceStatus.STATE_STUCK,
    InstanceState.DEAD: pb.InstanceStatus.STATE_DEAD,
}


def _instance_entry(instance: EngineInstance, problem: str = "") -> pb.InstanceStatus:
    state = instance.state
    if state is InstanceState.DEAD:
        problem = "the engine has died"
    return pb.InstanceStatus(
        index=instance.index,
        state=INSTANCE_STATES[state],
        routed_requests=instance.requests,
        engine_problem=problem or instance.problem() or "",
        device_slice=instance.device_slice,
    )


async def _instance_report(instance: EngineInstance, include_processes: bool) -> InstanceReport:
    """The instance's scheduler counts (and processes); none when its engine is stuck (not one more call queued
    behind the stuck one) or dead. Raises what a call into the engine raised."""
    entry = _instance_entry(instance)
    report = InstanceReport(entry)
    if instance.state is InstanceState.DEAD:
        raise EngineDead("the engine has died")
    if instance.state is InstanceState.STUCK:
        return report
    engine = instance.engine
    state = await engine.scheduler_state()
    entry.running_requests = state.running
    entry.waiting_requests = state.waiting
    entry.kv_cache_usage = state.kv_cache_usage
    if include_processes:
        report.processes.append(
            _engine_process(instance.index, pb.EngineProcess.ROLE_ENGINE_CORE, await engine.engine_core_report())
        )
        for worker in await engine.worker_reports():
            report.processes.append(_engine_process(instance.index, pb.EngineProcess.ROLE_WORKER, worker))
    return report


def _engine_process(instance: int, role: pb.EngineProcess.Role, report: dict) -> pb.EngineProcess:
    return pb.EngineProcess(
        role=role,
        pid=report["pid"],
        vllm_version=report["vllm_version"],
        seams=report["seams"],
        model_runner=report.get("model_runner", ""),
        mixed_logprobs_steps=report.get("mixed_logprobs_steps", 0),
        instance=instance,
        environment=report.get("environment", {}),
    )
