"""gonka.mlnode.v1.ValidationService: other nodes' inferences replayed here and judged as the chain judges them.

Each item's original request goes through the same translation as Generate (so the replay runs
exactly what a Generate of that request would), with the executor's tokens enforced, its k and the
resolved logprobs mode; the replay's chain lists are compared with the executor's by
engine_ext.inference_verdict (the consensus core's distance).
"""

from __future__ import annotations

import asyncio
import logging
import math
import uuid
from collections.abc import AsyncIterator
from contextlib import aclosing

import grpc

from engine_ext.chain_lists import chain_top_lists
from engine_ext.consensus.inference_distance import Position
from engine_ext.consensus.logprobs_mode import LogprobsMode, detect_logprobs_mode
from engine_ext.engine import MlnodeEngine
from engine_ext.errors import EngineError
from engine_ext.inference_verdict import InferenceFailure, InferenceJudgement, judge_inference
from engine_ext.model_facts import ModelFacts
from gonka.mlnode.v1 import inference_pb2 as pb
from gonka.mlnode.v1 import validation_pb2 as vpb
from server.admission import Admission
from server.errors import Reason, ServiceError, abort_with, invalid_field
from server.engine_failures import engine_failure
from server.poc.artifact_validation import ValidatedCallback, validate_poc_artifacts
from server.poc.batch_runner import PocBatchRunner
from server.poc.round_params import PocLimits
from server.service_registration import decode_request
from server.translation import RequestTranslator
from server.translation.prompt import require_in_vocabulary
from server.translation.replay import LOGPROBS_MODES

log = logging.getLogger(__name__)
MAX_ITEMS = 1024
# Replays in flight at once per call: the engine batches them; more would only queue in memory.
MAX_CONCURRENT_REPLAYS = 128
MODES = {mode: value for value, mode in LOGPROBS_MODES.items() if mode is not None}
FAILURES = {
    None: vpb.INFERENCE_FAILURE_UNSPECIFIED,
    InferenceFailure.SIMILARITY_BELOW_THRESHOLD: vpb.INFERENCE_FAILURE_SIMILARITY_BELOW_THRESHOLD,
    InferenceFailure.LENGTH_DIFFERS: vpb.INFERENCE_FAILURE_LENGTH_DIFFERS,
    InferenceFailure.TOKEN_DIFFERS: vpb.INFERENCE_FAILURE_TOKEN_DIFFERS,
    InferenceFailure.EMPTY_TOP_K: vpb.INFERENCE_FAILURE_EMPTY_TOP_K,
}
RETRYABLE_CODES = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.RESOURCE_EXHAUSTED}


class ValidationServicer:
    def __init__(
        self,
        engine: MlnodeEngine,
        facts: ModelFacts,
        translator: RequestTranslator,
        admission: Admission,
        poc_runner: PocBatchRunner,
        poc_limits: PocLimits,
        deliver_validated: ValidatedCallback,
    ) -> None:
        self._engine = engine
        self._facts = facts
        self._translator = translator
        self._admission = admission
        self._poc_runner = poc_runner
        self._poc_limits = poc_limits
        self._deliver_validated = deliver_validated

    async def ValidateInference(
        self, raw: bytes, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[vpb.ValidateInferenceResponse]:
        failure: ServiceError | None = None
        try:
            request = decode_request(vpb.ValidateInferenceRequest, raw)
            gate = self._admission.gate
            gate_closings = gate.closings
            items = list(request.items)
            if not items:
                raise invalid_field("items", "must hold at least one item")
            if len(items) > MAX_ITEMS:
                raise invalid_field("items", f"at most {MAX_ITEMS} items per call, got {len(items)}")
            call_id = uuid.uuid4().hex[:12]
            slots = asyncio.Semaphore(MAX_CONCURRENT_REPLAYS)
            # One stream slot for the whole call, whatever its number of items.
            with self._admission.stream():
                tasks = [
                    asyncio.create_task(self._verdict(index, item, f"validate-{call_id}-{index}", slots))
                    for index, item in enumerate(items)
                ]
                try:
                    for finished in asyncio.as_completed(tasks):
                        verdict = await finished
                        if gate.closings != gate_closings:
                            # A mining round started and aborted the replays: what they left is no verdict.
                            raise gate.preemption()
                        yield verdict
                finally:
                    for task in tasks:
                        task.cancel()
        except ServiceError as error:
            failure = error
        if failure is not None:
            await abort_with(context, failure)

    async def ValidatePocArtifacts(
        self, raw: bytes, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[vpb.ValidatePocArtifactsResponse]:
        failure: ServiceError | None = None
        try:
            request = decode_request(vpb.ValidatePocArtifactsRequest, raw)
            self._admission.require_open()
            async with aclosing(
                validate_poc_artifacts(request, self._poc_runner, self._poc_limits, self._deliver_validated)
            ) as responses:
                async for response in responses:
                    yield response
        except Exception as error:
            failure = engine_failure(error, None, self._admission)
        if failure is not None:
            await abort_with(context, failure)

    async def _verdict(
        self, index: int, item: vpb.InferenceItem, request_id: str, slots: asyncio.Semaphore
    ) -> vpb.ValidateInferenceResponse:
        try:
            async with slots:
                verdict = await self._judge(item, request_id)
            return vpb.ValidateInferenceResponse(index=index, verdict=verdict)
        except ServiceError as error:
            return vpb.ValidateInferenceResponse(index=index, error=_item_error(error))
        except Exception as error:  # an engine failure ends this item alone
            return vpb.ValidateInferenceResponse(
                index=index, error=_item_error(engine_failure(error, None, self._admission))
            )

    async def _judge(self, item: vpb.InferenceItem, request_id: str) -> vpb.InferenceVerdict:
        if not item.HasField("threshold"):
            raise invalid_field("threshold", "is required: the item passes iff similarity > threshold")
        if not math.isfinite(item.threshold):
            raise invalid_field("threshold", f"must be finite, got {item.threshold}")
        if not item.HasField("request"):
            raise invalid_field("request", "is required: the original request")
        if item.executor_could_not_serve:
            return await self._judge_unserved(item, request_id)
        executor = _executor_positions(item.positions)
        require_in_vocabulary([token for token, _ in executor], self._facts, "positions.token_ids")
        k = (
            item.request.logprobs.top_logprobs
            if item.request.logprobs.HasField("top_logprobs")
            else max(item.positions.top_k, 1)
        )
        if k < 1:
            raise invalid_field("request.logprobs.top_logprobs", "the chain's k must be at least 1")
        mode, detected = _mode(item, executor, self._engine.default_logprobs_mode)
        replay = await self._replay(item.request, request_id, [token for token, _ in executor], k, mode)
        judgement = judge_inference(executor, replay, k, item.threshold)
        return _verdict_message(judgement, mode, detected, len(replay))

    async def _judge_unserved(self, item: vpb.InferenceItem, request_id: str) -> vpb.InferenceVerdict:
        """The executor could not serve the request: it is at fault iff this node can."""
        try:
            replay = await self._replay(item.request, request_id, None, 1, None)
        except ServiceError as error:
            if error.code == grpc.StatusCode.INVALID_ARGUMENT:
                return vpb.InferenceVerdict(passed=True, similarity=1.0)  # nobody can serve it
            raise
        return vpb.InferenceVerdict(
            passed=False,
            similarity=0.0,
            failure=vpb.INFERENCE_FAILURE_EXECUTOR_COULD_NOT_SERVE,
            replayed_tokens=len(replay),
        )

    async def _replay(
        self,
        original: pb.GenerateRequest,
        request_id: str,
        enforced: list[int] | None,
        k: int,
        mode: LogprobsMode | None,
    ) -> list[Position]:
        request = pb.GenerateRequest()
        request.CopyFrom(original)
        request.request_id = ""
        request.ClearField("stream")
        del request.enforced_token_ids[:]
        if enforced is not None:
            request.enforced_token_ids.extend(enforced)
        request.logprobs.top_logprobs = k
        request.logprobs.mode = MODES[mode] if mode is not None else pb.LOGPROBS_MODE_UNSPECIFIED
        request.logprobs.ClearField("chain_top_logprobs")
        try:
            plan = await self._translator.plan(request, request_id)
        except ServiceError as error:
            raise _within_request(error) from None
        positions: list[Position] = []
        try:
            async with aclosing(await self._engine.generate(plan.request)) as steps:
                async for step in steps:
                    for delta in step.outputs:
                        if delta.logprobs is not None:
                            lists = chain_top_lists(delta.token_ids, delta.logprobs, k)
                            positions.extend((token, dict(entries)) for token, entries in zip(delta.token_ids, lists))
        except EngineError as error:
            raise engine_failure(error, plan, self._admission) from error
        return positions


def _executor_positions(positions: vpb.ExecutorPositions) -> list[Position]:
    k = positions.top_k
    count = len(positions.token_ids)
    if not count:
        raise invalid_field(
            "positions.token_ids", "must not be empty (set executor_could_not_serve when the executor served nothing)"
        )
    if len(positions.top_ids) != count * k or len(positions.top_logprobs) != count * k:
        raise invalid_field(
            "positions.top_ids", f"{count} positions of {k} entries need {count * k} top_ids and top_logprobs"
        )
    ids, logprobs = positions.top_ids, positions.top_logprobs
    if k == 0:  # an executor that recorded no lists: judged EMPTY_TOP_K, not refused
        return [(token, {}) for token in positions.token_ids]
    return [
        (token, dict(zip(ids[i * k : (i + 1) * k], logprobs[i * k : (i + 1) * k])))
        for i, token in enumerate(positions.token_ids)
    ]


def _mode(item: vpb.InferenceItem, executor: list[Position], default: LogprobsMode) -> tuple[LogprobsMode, bool]:
    """Explicit > detected from the executor's lists > the server's default; and whether it was detected."""
    stated = LOGPROBS_MODES.get(item.mode)
    if stated is not None:
        return stated, False
    detected = detect_logprobs_mode(top for _, top in executor)
    return (default, False) if detected is None else (detected, True)


def _verdict_message(
    judgement: InferenceJudgement, mode: LogprobsMode, detected: bool, replayed: int
) -> vpb.InferenceVerdict:
    verdict = vpb.InferenceVerdict(
        passed=judgement.passed,
        distance=judgement.distance,
        similarity=judgement.similarity,
        failure=FAILURES[judgement.failure],
        top_ids_found=judgement.top_ids_found,
        mode=MODES[mode],
        mode_detected=detected,
        replayed_tokens=replayed,
    )
    if judgement.first_differing_position is not None:
        verdict.first_differing_position = judgement.first_differing_position
    if judgement.executor_token_id is not None:
        verdict.executor_token_id = judgement.executor_token_id
    if judgement.replay_token_id is not None:
        verdict.replay_token_id = judgement.replay_token_id
    return verdict


def _within_request(error: ServiceError) -> ServiceError:
    """A field of the item's request, named from the item (request.sampling.top_p, ...)."""
    if error.field:
        error.field = f"request.{error.field}"
    return error


def _item_error(error: ServiceError) -> vpb.ItemError:
    return vpb.ItemError(
        code=error.code.name,
        reason=Reason.Name(error.reason),
        field=error.field or "",
        message=error.message,
        retryable=error.code in RETRYABLE_CODES,
    )
