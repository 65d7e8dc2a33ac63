"""gonka.mlnode.v1.ValidationService: other nodes' inferences replayed here and judged as the chain judges them.

Each item's original request goes through the same translation as Generate (so the replay runs
exactly what a Generate of that request would), with the executor's tokens enforced, its k and the
resolved logprobs mode; the replay's chain lists are compared with the executor's by
engine_ext.generation.inference_verdict (the consensus core's distance).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import uuid
from collections.abc import AsyncIterator
from contextlib import aclosing

import grpc

from engine_ext.consensus.inference_distance import Position, sequence_distance
from engine_ext.consensus.logprobs_mode import (
    LogprobsMode,
    ModeResolution,
    ModeSource,
    modes_indistinguishable,
    resolve_logprobs_mode,
    stated_logprobs_mode,
)
from engine_ext.generation.generation_request import GenerationRequest
from engine_ext.generation.inference_verdict import InferenceFailure, InferenceJudgement, judge_inference
from engine_ext.generation.outputs import FinishReason
from engine_ext.model_facts import ModelFacts
from gonka.mlnode.v1 import inference_pb2 as pb
from gonka.mlnode.v1 import validation_pb2 as vpb
from server.core.errors import Reason, ServiceError, abort_with, invalid_field
from server.core.instances import EngineInstances
from server.core.request_registry import RequestRegistry
from server.core.service_registration import decode_request
from server.poc.batches.round_params import PocLimits
from server.poc.gate.admission import Admission
from server.poc.validation.artifact_validation import ValidatedCallback, validate_poc_artifacts
from server.services.inference_replay import Replay, replay_end_error, require_fits_the_context, run_replay
from server.services.replay_slots import ReplaySlots
from server.translation import GenerationPlan, RequestTranslator
from server.translation.engine_failures import engine_failure
from server.translation.prompt import require_in_vocabulary
from server.translation.replay import LOGPROBS_MODE_VALUES, LOGPROBS_MODES

log = logging.getLogger(__name__)
MAX_ITEMS = 1024
# Replays in flight at once per call: the engine batches them; more would only queue in memory.
MAX_CONCURRENT_REPLAYS = 128
MODE_SOURCES = {
    ModeSource.ITEM: vpb.LOGPROBS_MODE_SOURCE_ITEM,
    ModeSource.REQUEST: vpb.LOGPROBS_MODE_SOURCE_REQUEST,
    ModeSource.REPLAY: vpb.LOGPROBS_MODE_SOURCE_REPLAY,
    ModeSource.STRICTER: vpb.LOGPROBS_MODE_SOURCE_STRICTER,
    ModeSource.PADDING: vpb.LOGPROBS_MODE_SOURCE_PADDING,
    ModeSource.DEFAULT: vpb.LOGPROBS_MODE_SOURCE_DEFAULT,
}
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
        instances: EngineInstances,
        facts: ModelFacts,
        translator: RequestTranslator,
        admission: Admission,
        registry: RequestRegistry,
        poc_limits: PocLimits,
        deliver_validated: ValidatedCallback,
    ) -> None:
        """Replays go to the least-loaded instance each (EngineInstances.pick); PoC validation's batches are
        spread over the available instances (server.poc.batches.spread)."""
        self._instances = instances
        # Every instance serves the same model with the same flags.
        self._default_logprobs_mode = instances.first.engine.default_logprobs_mode
        self._facts = facts
        self._translator = translator
        self._admission = admission
        self._registry = registry
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
            # The call's own stream slot serves one replay; each other one running beside it holds its own.
            with self._admission.stream():
                slots = ReplaySlots(self._admission, MAX_CONCURRENT_REPLAYS)
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
            instances = self._instances.require_available()
            async with aclosing(
                validate_poc_artifacts(request, instances, self._poc_limits, self._deliver_validated)
            ) as responses:
                async for response in responses:
                    yield response
        except Exception as error:
            failure = engine_failure(error, None, self._admission)
        if failure is not None:
            await abort_with(context, failure)

    async def _verdict(
        self, index: int, item: vpb.InferenceItem, request_id: str, slots: ReplaySlots
    ) -> vpb.ValidateInferenceResponse:
        try:
            verdict = await self._judge(item, request_id, slots)
            return vpb.ValidateInferenceResponse(index=index, verdict=verdict)
        except ServiceError as error:
            return vpb.ValidateInferenceResponse(index=index, error=_item_error(error))
        except Exception as error:  # an engine failure ends this item alone
            return vpb.ValidateInferenceResponse(
                index=index, error=_item_error(engine_failure(error, None, self._admission))
            )

    async def _judge(self, item: vpb.InferenceItem, request_id: str, slots: ReplaySlots) -> vpb.InferenceVerdict:
        if not item.HasField("threshold"):
            raise invalid_field("threshold", "is required: the item passes iff similarity > threshold")
        if not math.isfinite(item.threshold):
            raise invalid_field("threshold", f"must be finite, got {item.threshold}")
        if not item.HasField("request"):
            raise invalid_field("request", "is required: the original request")
        if item.executor_could_not_serve:
            return await self._judge_unserved(item, request_id, slots)
        executor = _executor_positions(item.positions)
        recorded = [token for token, _ in executor]
        require_in_vocabulary(recorded, self._facts, "positions.token_ids")
        require_in_vocabulary(list(item.positions.top_ids), self._facts, "positions.top_ids")
        k = (
            item.request.logprobs.top_logprobs
            if item.request.logprobs.HasField("top_logprobs")
            else max(item.positions.top_k, 1)
        )
        if k < 1:
            raise invalid_field("request.logprobs.top_logprobs", "the chain's k must be at least 1")
        item_mode, request_mode = LOGPROBS_MODES.get(item.mode), LOGPROBS_MODES.get(item.request.logprobs.mode)
        executor_lists = [top for _, top in executor]
        default = self._default_logprobs_mode
        async with slots.slot():
            plan = await self._plan(item.request, request_id, recorded, k)
            require_fits_the_context(plan.request, len(recorded), self._facts.max_model_len)
            both = stated_logprobs_mode(
                item_mode, request_mode
            ) is None and self._instances.first.engine.both_logprobs_modes_fit(k)
            if both:
                replay = await self._replay(plan, request_id, both_logprobs_modes=True)
            else:
                resolution = resolve_logprobs_mode(item_mode, executor_lists, default, request_mode=request_mode)
                replay = await self._replay(plan, request_id, logprobs_mode=resolution.mode)
        stated_max_tokens = item.request.sampling.max_tokens if item.request.sampling.HasField("max_tokens") else None
        unjudgeable = replay_end_error(
            replay.finish, len(replay.positions), len(recorded), stated_max_tokens, self._admission
        )
        if unjudgeable is not None:
            raise unjudgeable
        if not both:
            return _verdict_message(
                judge_inference(executor, replay.positions, k, item.threshold), resolution, False, len(replay.positions)
            )
        # Nobody stated the mode: the record is judged in the mode the replay's two lists place it in.
        raw_positions = replay.raw_positions
        assert raw_positions is not None  # the replay asked for both modes
        judgements = {
            LogprobsMode.PROCESSED: judge_inference(executor, replay.positions, k, item.threshold),
            LogprobsMode.RAW: judge_inference(executor, raw_positions, k, item.threshold),
        }
        distances = {mode: judgement.distance for mode, judgement in judgements.items()}
        resolution = resolve_logprobs_mode(
            item_mode, executor_lists, default, request_mode=request_mode, replay_distances=distances
        )
        indistinguishable = modes_indistinguishable(_between_modes(replay, k), distances)
        return _verdict_message(judgements[resolution.mode], resolution, indistinguishable, len(replay.positions))

    async def _judge_unserved(
        self, item: vpb.InferenceItem, request_id: str, slots: ReplaySlots
    ) -> vpb.InferenceVerdict:
        """The executor could not serve the request: it is at fault iff this node can. The request goes
        through Generate's checks as it is (a refusal there: nobody can serve it); then one token of it
        is generated, the probe, whose own refusals and failures are this item's errors."""
        async with slots.slot():
            try:
                plan = await self._translator.replay(item.request, request_id, ())
            except ServiceError as error:
                if error.code == grpc.StatusCode.INVALID_ARGUMENT:
                    return vpb.InferenceVerdict(passed=True, similarity=1.0)  # nobody can serve it
                raise _within_request(error) from None
            probe = dataclasses.replace(plan, request=one_token_probe(plan.request))
            try:
                replay = await self._replay(probe, request_id)
            except ServiceError as error:
                if error.reason == Reason.INVALID_CONSTRAINT:
                    return vpb.InferenceVerdict(
                        passed=True, similarity=1.0
                    )  # the engine cannot compile the request's grammar
                raise
        if replay.finish is None or replay.finish.reason not in (FinishReason.STOP, FinishReason.LENGTH):
            unjudgeable = replay_end_error(replay.finish, len(replay.positions), 1, 1, self._admission)
            assert unjudgeable is not None  # a replay that ended otherwise cannot be judged
            raise unjudgeable
        return vpb.InferenceVerdict(
            passed=False,
            similarity=0.0,
            failure=vpb.INFERENCE_FAILURE_EXECUTOR_COULD_NOT_SERVE,
            replayed_tokens=len(replay.positions),
        )

    async def _plan(self, original: pb.GenerateRequest, request_id: str, enforced: list[int], k: int) -> GenerationPlan:
        """The replay of `original` as Generate would run it (every check of Generate's), forcing `enforced`
        with the chain's k; the mode is the caller's."""
        try:
            return await self._translator.replay(original, request_id, enforced, k)
        except ServiceError as error:
            raise _within_request(error) from None

    async def _replay(self, plan: GenerationPlan, request_id: str, **changes) -> Replay:
        """Runs `plan` with `changes` to its request (the logprobs mode), tracked among the server's
        requests so that shutdown drains it and then aborts it like any stream."""
        if changes:
            plan = dataclasses.replace(plan, request=dataclasses.replace(plan.request, **changes))
        with self._registry.track(request_id), self._instances.pick() as instance:
            return await run_replay(instance, plan, self._admission)


def _between_modes(replay: Replay, k: int) -> float:
    """The chain's distance between the replay's own processed and raw lists (0 when they are the same)."""
    if replay.positions == replay.raw_positions:
        return 0.0
    assert replay.raw_positions is not None  # the replay asked for both modes
    return sequence_distance(replay.positions, replay.raw_positions, k)


def one_token_probe(request: GenerationRequest) -> GenerationRequest:
    """`request` cut to one output of one token (min_tokens cleared: the network's requests ask for 64 or
    more), without logprobs: whether this node serves it at all."""
    sampling = {name: value for name, value in request.sampling.items() if name not in ("min_tokens", "n")}
    return dataclasses.replace(request, sampling={**sampling, "max_tokens": 1}, top_logprobs=None, prompt_logprobs=None)


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


def _verdict_message(
    judgement: InferenceJudgement, resolution: ModeResolution, indistinguishable: bool, replayed: int
) -> vpb.InferenceVerdict:
    verdict = vpb.InferenceVerdict(
        passed=judgement.passed,
        distance=judgement.distance,
        similarity=judgement.similarity,
        failure=FAILURES[judgement.failure],
        top_ids_found=judgement.top_ids_found,
        mode=LOGPROBS_MODE_VALUES[resolution.mode],
        mode_detected=resolution.detected,
        mode_source=MODE_SOURCES[resolution.source],
        modes_indistinguishable=indistinguishable,
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
