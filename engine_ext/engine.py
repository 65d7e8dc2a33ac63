"""The running engine as the server sees it: vLLM's AsyncLLM behind the project's own types.

Generation goes through vLLM's AsyncLLM.generate, or through the lean token streams
(engine_ext.seams.token_streams) for requests that want token ids and logprobs only. Both paths yield
GenerationSteps and raise engine_ext.generation.errors; aborts, abort-all and pause reach both (token streams
bypass vLLM's frontend, so vLLM's own pause_generation would not see them). What vLLM has no public
call for (the scheduler's live state, the plugin's per-process report) goes through the utility
and collective-RPC methods the plugin registers, each bounded by EngineCalls.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Collection
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

import vllm.envs as vllm_envs
from prometheus_client import CollectorRegistry
from vllm.inputs import TokensPrompt
from vllm.platforms import current_platform
from vllm.sampling_params import RequestOutputKind
from vllm.v1.engine.async_llm import AsyncLLM
from vllm.v1.engine.exceptions import EngineDeadError, EngineGenerateError

from engine_ext.consensus.logprobs_mode import DEFAULT_MODE, LogprobsMode
from engine_ext.engine_calls import EngineCalls
from engine_ext.generation.both_logprobs_modes import both_modes_width, split_both_modes
from engine_ext.generation.errors import EngineDead, EnginePaused, RequestFailed, RequestRejected
from engine_ext.generation.generation_request import GenerationRequest, sampling_params
from engine_ext.generation.outputs import GenerationStep
from engine_ext.generation.packed_logprobs import request_packed_logprobs
from engine_ext.generation.request_outputs import RequestOutputReader
from engine_ext.generation.request_refusals import REQUEST_REFUSALS
from engine_ext.model_facts import ModelFacts, read_model_facts
from engine_ext.poc.batch import BATCH_INSUFFICIENT_BLOCKS, BATCH_OK, PocBatch, PocBatchResult
from engine_ext.seams import seams_for_installed_vllm
from engine_ext.seams.token_streams import TokenStreams, token_stream_possible
from engine_ext.seams.vllm_version import UnsupportedVllmVersion, require_v1_model_runners
from engine_ext.step_progress import ProgressSample, StepProgress

log = logging.getLogger(__name__)

# The batch that compiles the PoC forward before serving: at least two nonces (a dynamic token count is
# never specialized to 0 or 1), a short sequence, any identity.
PREPARE_BLOCK_HASH = "prepare-poc-forward"
PREPARE_PUBLIC_KEY = "prepare-poc-forward"
PREPARE_SEQ_LEN = 16
PREPARE_K_DIM = 2


class ExtensionMissing(RuntimeError):
    pass


class PocForwardUnprepared(RuntimeError):
    pass


@dataclass(frozen=True)
class PocDecoderReport:
    """What the workers made of the served model for the PoC forward (engine_ext.poc.decoders)."""

    architecture: str
    # The PocDecoder's name; empty when unsupported.
    decoder: str = ""
    # Whether the compiled forward compiles this model's layers (else it runs them eagerly, as vLLM does).
    compiles: bool = False
    # Why the PoC forward cannot run this model (naming the architecture); empty when supported.
    unsupported: str = ""


@dataclass(frozen=True)
class SchedulerState:
    running: int
    waiting: int
    # Requests the engine core still tracks (running, waiting or preempted).
    unfinished: int
    kv_cache_usage: float


class MlnodeEngine:
    def __init__(
        self,
        llm: AsyncLLM,
        calls: EngineCalls,
        default_logprobs_mode: LogprobsMode = DEFAULT_MODE,
        request_metrics: bool = False,
        poc_compiled: bool = True,
        metrics_registry: CollectorRegistry | None = None,
    ) -> None:
        """`request_metrics`: token streams feed vLLM's per-request metrics too (engine_ext.seams.token_streams).
        `poc_compiled`: PoC batches run the compiled forward, else the eager one (engine_ext.poc.worker_forward).
        `metrics_registry`: this engine's vLLM metrics (engine_ext.engine_metrics.claim_engine_metrics)."""
        self._llm = llm
        self._metrics_registry = metrics_registry or CollectorRegistry()
        self.poc_compiled = poc_compiled
        self.calls = calls
        # For requests that state no logprobs mode (the network's default: processed).
        self.default_logprobs_mode = default_logprobs_mode
        self._eos_token_id = int(llm.get_tokenizer().eos_token_id)
        self._speculative = speculative_decoding_on(llm.vllm_config)
        self._seams = seams_for_installed_vllm()
        self._token_streams = TokenStreams(llm, request_metrics)
        self._token_streams.install()
        self._progress = StepProgress()
        self._progress.install(llm.output_processor)
        # Client-side ids of the requests on vLLM's generate() path (token streams track their own).
        self._generating: set[str] = set()
        self._paused = False

    async def generate(self, request: GenerationRequest) -> AsyncGenerator[GenerationStep, None]:
        """Submits the request; returns its steps until every output has finished.

        Raises EnginePaused, RequestRejected or EngineDead here; the steps' iterator raises
        EngineDead or RequestFailed. Closing the iterator early aborts the engine request."""
        if self._paused:
            raise EnginePaused("the engine is paused")
        llm = self._llm
        if llm.errored:
            raise EngineDead("the engine has died")
        mode = request.logprobs_mode or self.default_logprobs_mode
        if self._speculative:
            refusal = speculation_refusal(request, mode)
            if refusal is not None:
                raise refusal
        both = request.both_logprobs_modes
        # Both modes' lists are split and padded on the way out (engine_ext.generation.both_logprobs_modes).
        pad_masked = mode == LogprobsMode.PROCESSED and not both
        params = sampling_params(request, mode, self._eos_token_id)
        streamed = self._token_streams.enabled and token_stream_possible(params)
        if streamed:
            request_packed_logprobs(params)
        elif both:
            # vLLM's generate() merges late deltas through a dict of each position's entries, which would
            # collapse the token ids the two lists share: one final output is never merged.
            params.output_kind = RequestOutputKind.FINAL_ONLY
        prompt = TokensPrompt(prompt_token_ids=request.prompt_token_ids)
        try:
            engine_request = await self._seams.engine_request(llm, request.request_id, prompt, params)
        except REQUEST_REFUSALS as error:
            part = "constraint" if request.constraint is not None else "request"
            raise RequestRejected(str(error), part) from error
        if not streamed:
            reader = RequestOutputReader(params.logprobs, request.prompt_logprobs, request.include_text, pad_masked)
            steps = self._generated_steps(engine_request, params, request.request_id, reader)
        else:
            try:
                stream = await self._token_streams.open(request.request_id, engine_request, pad_masked)
            except EngineDeadError as error:
                raise EngineDead("the engine has died") from error
            # The token stream's own iterator, with no layer between it and the caller: it runs once
            # per streamed token (its failures already arrive as engine_ext errors).
            steps = self._token_streams.outputs(stream)
        if not both:
            return steps
        assert request.top_logprobs is not None  # both modes are asked for with a k (GenerationRequest)
        return _split_both_modes(steps, request.top_logprobs)

    def both_logprobs_modes_fit(self, k: int) -> bool:
        """Whether a request can carry both modes' top-k lists (GenerationRequest.both_logprobs_modes):
        2k + 1 logprobs within the engine's max_logprobs, and no speculative decoding (no replays then)."""
        engine_max = self._llm.vllm_config.model_config.max_logprobs
        return not self._speculative and (engine_max < 0 or both_modes_width(k) <= engine_max)

    async def _generated_steps(
        self, engine_request: Any, params: Any, request_id: str, reader: RequestOutputReader
    ) -> AsyncGenerator[GenerationStep, None]:
        """vLLM's generate() path, as GenerationSteps and engine_ext errors."""
        self._generating.add(request_id)
        try:
            async for output in self._llm.generate(engine_request, params, request_id):
                yield reader.step(output)
        except EngineDeadError as error:
            raise EngineDead("the engine has died") from error
        except EngineGenerateError as error:
            raise RequestFailed(f"the engine failed the request: {error.__cause__!r}") from error
        finally:
            self._generating.discard(request_id)

    async def abort(self, request_ids: Collection[str]) -> None:
        """Ends the requests (given by their client-side ids) with finish reason abort."""
        streams = self._token_streams.streams_of(request_ids)
        streamed = {stream.external_request_id for stream in streams}
        await self._abort_on_both_paths(
            streams, [request_id for request_id in request_ids if request_id not in streamed]
        )

    async def abort_all(self) -> int:
        """Ends every request in flight, on both paths, with finish reason abort; returns how many."""
        streams, others = self._token_streams.all_streams(), list(self._generating)
        await self._abort_on_both_paths(streams, others)
        return len(streams) + len(others)

    async def _abort_on_both_paths(self, streams: list[Any], others: list[str]) -> None:
        """Token streams through their own abort; the rest (client-side ids) through vLLM's."""
        await self._token_streams.abort(streams)
        if others and not self._llm.errored:
            await self._llm.abort(others)

    async def pause(self) -> int:
        """Refuses new requests (EnginePaused) and aborts those in flight; returns how many."""
        self._paused = True
        return await self.abort_all()

    def resume(self) -> None:
        self._paused = False

    @property
    def paused(self) -> bool:
        return self._paused

    def step_progress(self) -> ProgressSample:
        """The engine core's step progress and the requests waiting on it, read without a call into the engine
        (a hung engine answers none): for engine_ext.hang_watch."""
        unfinished = self._llm.output_processor.get_num_unfinished_requests() + len(self._token_streams.all_streams())
        return ProgressSample(self._progress.output_batches, unfinished)

    async def scheduler_state(self) -> SchedulerState:
        state = await self._utility("mlnode_scheduler_state")
        return SchedulerState(**state)

    async def poc_forward(self, batch: PocBatch) -> PocBatchResult:
        """One PoC batch on KV blocks borrowed for it inside the same engine-core call
        (engine_ext.poc.block_lease); the result says when too few blocks were free. Waited on as engine work
        (EngineCalls.work_timeout_seconds), not as a report."""
        return PocBatchResult.from_wire(
            await self._guarded(
                "PoC forward (utility call mlnode_poc_forward)", self._poc_call(batch), self.calls.work_timeout_seconds
            )
        )

    async def poc_decoder(self) -> PocDecoderReport:
        """The PoC decoder every worker made for the served model (the first rank's report: every rank runs the
        same model)."""
        reports = await self._guarded(
            "PoC decoder (collective_rpc mlnode_poc_decoder)", self._llm.collective_rpc("mlnode_poc_decoder")
        )
        return PocDecoderReport(**reports[0])

    @property
    def on_cpu(self) -> bool:
        """Whether the engine runs on vLLM's CPU platform, whose kernels are all built ahead of time."""
        return current_platform.is_cpu()

    async def prepare_poc_forward(self) -> PocBatchResult:
        """Runs the PoC forward's first batches now, so that no round or validation waits for what they build:
        the compiled forward's graphs (torch.compile takes seconds on a CPU, longer on a large model; inductor's
        cache shortens later starts), or on a GPU the kernels an eager model's layers compile on first use. Not
        bounded by the engine-call timeout: it runs before serving.

        On a GPU the compiling batch is as large as a PoC batch may be (max_num_batched_tokens): inductor
        tunes each generated kernel's launch configuration on the first call and keeps it for every later
        size, so a small first batch leaves full-size batches on configurations chosen for a few tokens
        (vLLM's own graph is first called by its profile run, at full size too). Where too few KV blocks
        are free for that, a small batch compiles it. A CPU tunes nothing at run time: a small batch.

        A second batch of one nonce fewer follows: the pieces of the compiled forward between vLLM's name-keyed
        modules (engine_ext.seams.name_keyed_ops) start with a static token count, which dynamo makes dynamic at
        the first other size, so that recompile happens here rather than in a round. Returns the second batch's
        result (the graph count and compile seconds of both)."""
        small = current_platform.is_cpu()
        result = await self._prepare_call(small)
        if result.status == BATCH_INSUFFICIENT_BLOCKS:
            log.warning(
                "the PoC forward's first batch is a small one: %d KV blocks free, %d needed for a full-size one",
                result.free_blocks,
                result.needed_blocks,
            )
            small = True
            result = await self._prepare_call(small)
        if result.status == BATCH_OK:
            result = await self._prepare_call(small, one_nonce_fewer=True)
        if result.status != BATCH_OK:
            raise PocForwardUnprepared(f"the PoC forward's first batches came back {result.status}: {result.detail}")
        return result

    async def _prepare_call(self, small: bool, one_nonce_fewer: bool = False) -> PocBatchResult:
        config = self._llm.vllm_config
        scheduler = config.scheduler_config
        nonces, seq_len = (
            (3, PREPARE_SEQ_LEN)
            if small
            else full_size_shape(
                scheduler.max_num_batched_tokens, scheduler.max_num_seqs, config.model_config.max_model_len
            )
        )
        if one_nonce_fewer:
            # Never one nonce: dynamo specializes a size of 1 rather than making the size dynamic.
            nonces = max(2, nonces - 1)
        batch = PocBatch(PREPARE_BLOCK_HASH, PREPARE_PUBLIC_KEY, tuple(range(nonces)), seq_len, PREPARE_K_DIM, False)
        try:
            return PocBatchResult.from_wire(await self._poc_call(batch))
        except EngineDeadError as error:
            raise EngineDead("the engine has died") from error

    def _poc_call(self, batch: PocBatch) -> Any:
        return self._llm.engine_core.call_utility_async("mlnode_poc_forward", batch.to_wire(), self.poc_compiled)

    async def require_extension(self) -> None:
        """Fails unless the plugin ran in the engine core (VLLM_PLUGINS can exclude it), and unless every worker
        runs vLLM's V1 model runner: without the seams, or on a runner they do not reach, the engine would serve,
        but wrongly."""
        try:
            await self.engine_core_report()
        except Exception as error:
            raise ExtensionMissing(
                "the gonka_mlnode vLLM plugin is not active in the engine core; if VLLM_PLUGINS is set, "
                f"it must include gonka_mlnode ({error})"
            ) from error
        try:
            require_v1_model_runners(await self.worker_reports())
        except UnsupportedVllmVersion as error:
            raise ExtensionMissing(str(error)) from error

    async def engine_core_report(self) -> dict[str, Any]:
        return await self._utility("mlnode_process_report")

    async def worker_reports(self) -> list[dict[str, Any]]:
        return await self._guarded(
            "worker report (collective_rpc mlnode_process_report)", self._llm.collective_rpc("mlnode_process_report")
        )

    def tokenizer(self) -> Any:
        """The served model's (Hugging Face) tokenizer, as the engine itself uses it."""
        return self._llm.get_tokenizer()

    def tokenizer_is_thread_safe(self) -> bool:
        """Whether the tokenizer's public methods may be called from several threads at once: vLLM routes those of
        a fast tokenizer through copies of its own, made as the engine starts (maybe_make_thread_pool)."""
        from vllm.tokenizers.hf import ThreadSafeHFTokenizerMixin

        return isinstance(self.tokenizer(), ThreadSafeHFTokenizerMixin)

    def model_facts(self) -> ModelFacts:
        return read_model_facts(self._llm.vllm_config, self.tokenizer())

    @property
    def logs_stats(self) -> bool:
        return bool(self._llm.log_stats)

    @property
    def log_stats_interval_seconds(self) -> float:
        return float(vllm_envs.VLLM_LOG_STATS_INTERVAL)

    async def log_stats(self) -> None:
        """vLLM's periodic throughput / queue / KV-cache log line, as its own servers print it."""
        await self._llm.do_log_stats()

    def metrics_registry(self) -> CollectorRegistry:
        """The registry holding this engine's vLLM metrics (vllm:*), apart from any other engine's
        (engine_ext.engine_metrics). Empty with --disable-log-stats."""
        return self._metrics_registry

    @property
    def errored(self) -> bool:
        return self._llm.errored

    def shutdown(self) -> None:
        self._llm.shutdown()

    async def _utility(self, name: str) -> Any:
        return await self._guarded(f"utility call {name}", self._llm.engine_core.call_utility_async(name))

    async def _guarded(self, name: str, call: Any, timeout_seconds: float | None = None) -> Any:
        try:
            return await self.calls.call(name, call, timeout_seconds)
        except EngineDeadError as error:
            raise EngineDead("the engine has died") from error


def speculative_decoding_on(vllm_config: Any) -> bool:
    """Whether the engine drafts and verifies tokens (vLLM's speculative_config): then speculation_refusal applies."""
    return vllm_config.speculative_config is not None


def speculation_refusal(request: GenerationRequest, mode: LogprobsMode) -> RequestRejected | None:
    """Why a request cannot be served as asked while speculative decoding is on, or None.

    Speculative decoding samples through vLLM's rejection sampler, which neither the sampler seam that
    forces a replay's tokens nor the per-request logprobs-mode seam reaches (vLLM loads no
    logits-processor plugin then): a replay would silently not be one, and every request's logprobs
    come in the engine-wide mode, processed (engine_factory). Raw logprobs are refused rather than
    silently processed."""
    if request.enforced_token_ids is not None or request.both_logprobs_modes:
        return RequestRejected("replays (enforced tokens) are not served while speculative decoding is on", "request")
    if request.top_logprobs is not None and mode != LogprobsMode.PROCESSED:
        return RequestRejected(
            f"{mode.value} are not served while speculative decoding is on: only {LogprobsMode.PROCESSED.value} are",
            "logprobs_mode",
        )
    return None


async def _split_both_modes(
    steps: AsyncGenerator[GenerationStep, None], k: int
) -> AsyncGenerator[GenerationStep, None]:
    """Each output's 2k+1-wide lists as its processed `logprobs` and raw `raw_logprobs`; closing this
    closes (and so aborts) the request's own iterator."""
    async with aclosing(steps):
        async for step in steps:
            for delta in step.outputs:
                if delta.logprobs is not None:
                    delta.logprobs, delta.raw_logprobs = split_both_modes(delta.logprobs, k)
            yield step


def full_size_shape(max_num_batched_tokens: int, max_num_seqs: int, max_model_len: int) -> tuple[int, int]:
    """(nonces, seq_len) of a batch as large as the engine's step: no more sequences than one step takes (vLLM
    sizes attention buffers by it: on an H200, FlashAttention 3's metadata build failed on 16-token nonces filling
    the step, more sequences than max_num_seqs), each at least PREPARE_SEQ_LEN tokens and at most the context
    (a nonce's KV blocks fill one row of the block table). With few sequences and a short context, the batch is
    as large as those allow."""
    nonces = max(2, min(max_num_seqs, max_num_batched_tokens // PREPARE_SEQ_LEN))
    return nonces, min(max_model_len, max(PREPARE_SEQ_LEN, max_num_batched_tokens // nonces))
