"""The running engine as the server sees it: vLLM's AsyncLLM behind the project's own types.

Generation goes through vLLM's AsyncLLM.generate, or through the lean token streams
(engine_ext.token_streams) for requests that want token ids and logprobs only. Both paths yield
GenerationSteps and raise engine_ext.errors; aborts, abort-all and pause reach both (token streams
bypass vLLM's frontend, so vLLM's own pause_generation would not see them). What vLLM has no public
call for (the scheduler's live state, the plugin's per-process report) goes through the utility
and collective-RPC methods the plugin registers, each bounded by EngineCalls.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Collection
from dataclasses import dataclass
from typing import Any

import vllm.envs as vllm_envs
from prometheus_client import CollectorRegistry
from vllm.inputs import TokensPrompt
from vllm.platforms import current_platform
from vllm.v1.engine.async_llm import AsyncLLM
from vllm.v1.engine.exceptions import EngineDeadError, EngineGenerateError
from vllm.v1.metrics.prometheus import get_prometheus_registry

from engine_ext.consensus.logprobs_mode import DEFAULT_MODE, LogprobsMode
from engine_ext.engine_calls import EngineCalls
from engine_ext.errors import EngineDead, EnginePaused, RequestFailed, RequestRejected
from engine_ext.generation_request import GenerationRequest, sampling_params
from engine_ext.model_facts import ModelFacts, read_model_facts
from engine_ext.outputs import GenerationStep
from engine_ext.packed_logprobs import request_packed_logprobs
from engine_ext.poc.batch import BATCH_INSUFFICIENT_BLOCKS, BATCH_OK, PocBatch, PocBatchResult
from engine_ext.request_outputs import RequestOutputReader
from engine_ext.seams import seams_for_installed_vllm
from engine_ext.vllm_version import UnsupportedVllmVersion, require_v1_model_runners
from engine_ext.token_streams import TokenStreams, token_stream_possible

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
    ) -> None:
        """`request_metrics`: token streams feed vLLM's per-request metrics too (engine_ext.token_streams).
        `poc_compiled`: PoC batches run the compiled forward, else the eager one (engine_ext.poc.worker_forward)."""
        self._llm = llm
        self.poc_compiled = poc_compiled
        self.calls = calls
        # For requests that state no logprobs mode (the network's default: processed).
        self.default_logprobs_mode = default_logprobs_mode
        self._eos_token_id = int(llm.get_tokenizer().eos_token_id)
        self._speculative = llm.vllm_config.speculative_config is not None
        self._seams = seams_for_installed_vllm()
        self._token_streams = TokenStreams(llm, request_metrics)
        self._token_streams.install()
        # Client-side ids of the requests on vLLM's generate() path (token streams track their own).
        self._generating: set[str] = set()
        self._paused = False

    async def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationStep]:
        """Submits the request; returns its steps until every output has finished.

        Raises EnginePaused, RequestRejected or EngineDead here; the steps' iterator raises
        EngineDead or RequestFailed. Closing the iterator early aborts the engine request."""
        if self._paused:
            raise EnginePaused("the engine is paused")
        llm = self._llm
        if llm.errored:
            raise EngineDead("the engine has died")
        if request.enforced_token_ids is not None and self._speculative:
            # Speculative decoding skips the sampler seam that forces the tokens (and vLLM loads no
            # logits-processor plugin then): a replay would silently not be one.
            raise RequestRejected(
                "replays (enforced tokens) are not served while speculative decoding is on", "request"
            )
        mode = request.logprobs_mode or self.default_logprobs_mode
        pad_masked = mode == LogprobsMode.PROCESSED
        params = sampling_params(request, mode, self._eos_token_id)
        streamed = self._token_streams.enabled and token_stream_possible(params)
        if streamed:
            request_packed_logprobs(params)
        prompt = TokensPrompt(prompt_token_ids=request.prompt_token_ids)
        try:
            engine_request = await self._seams.engine_request(llm, request.request_id, prompt, params)
        except self._seams.REQUEST_REFUSALS as error:
            part = "constraint" if request.constraint is not None else "request"
            raise RequestRejected(str(error), part) from error
        if not streamed:
            reader = RequestOutputReader(
                request.top_logprobs, request.prompt_logprobs, request.include_text, pad_masked
            )
            return self._generated_steps(engine_request, params, request.request_id, reader)
        try:
            stream = await self._token_streams.open(request.request_id, engine_request, pad_masked)
        except EngineDeadError as error:
            raise EngineDead("the engine has died") from error
        # The token stream's own iterator, with no layer between it and the caller: it runs once
        # per streamed token (its failures already arrive as engine_ext errors).
        return self._token_streams.outputs(stream)

    async def _generated_steps(
        self, engine_request: Any, params: Any, request_id: str, reader: RequestOutputReader
    ) -> AsyncIterator[GenerationStep]:
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

    async def scheduler_state(self) -> SchedulerState:
        state = await self._utility("mlnode_scheduler_state")
        return SchedulerState(**state)

    async def poc_forward(self, batch: PocBatch) -> PocBatchResult:
        """One PoC batch on KV blocks borrowed for it inside the same engine-core call
        (engine_ext.poc.block_lease); the result says when too few blocks were free."""
        return PocBatchResult.from_wire(
            await self._guarded("PoC forward (utility call mlnode_poc_forward)", self._poc_call(batch))
        )

    async def poc_decoder(self) -> PocDecoderReport:
        """The PoC decoder every worker made for the served model (the first rank's report: every rank runs the
        same model)."""
        reports = await self._guarded(
            "PoC decoder (collective_rpc mlnode_poc_decoder)", self._llm.collective_rpc("mlnode_poc_decoder")
        )
        return PocDecoderReport(**reports[0])

    async def compile_poc_forward(self) -> PocBatchResult:
        """Compiles the PoC forward now (for an engine with `poc_compiled`), so that no round or validation
        waits for it (torch.compile takes seconds on a CPU, longer on a large model; inductor's cache
        shortens later starts). Not bounded by the engine-call timeout: it runs before serving.

        On a GPU the compiling batch is as large as a PoC batch may be (max_num_batched_tokens): inductor
        tunes each generated kernel's launch configuration on the first call and keeps it for every later
        size, so a small first batch leaves full-size batches on configurations chosen for a few tokens
        (vLLM's own graph is first called by its profile run, at full size too). Where too few KV blocks
        are free for that, a small batch compiles it. A CPU tunes nothing at run time: a small batch. Returns the
        compiling batch's result (its graph count and compile seconds)."""
        result = await self._prepare_call(small=current_platform.is_cpu())
        if result.status == BATCH_INSUFFICIENT_BLOCKS:
            log.warning(
                "compiling the PoC forward on a small batch: %d KV blocks free, %d needed for a full-size one",
                result.free_blocks,
                result.needed_blocks,
            )
            result = await self._prepare_call(small=True)
        if result.status != BATCH_OK:
            raise PocForwardUnprepared(
                f"the compiled PoC forward's first batch came back {result.status}: {result.detail}"
            )
        return result

    async def _prepare_call(self, small: bool) -> PocBatchResult:
        config = self._llm.vllm_config
        scheduler = config.scheduler_config
        nonces, seq_len = (
            (2, PREPARE_SEQ_LEN)
            if small
            else full_size_shape(
                scheduler.max_num_batched_tokens, scheduler.max_num_seqs, config.model_config.max_model_len
            )
        )
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
        """The registry holding vLLM's engine metrics (vllm:*), read as vLLM's OpenAI server reads it
        for /metrics. vLLM's PrometheusStatLogger creates them in prometheus_client's global registry
        (it takes no registry), or in per-process files when PROMETHEUS_MULTIPROC_DIR is set; this
        is the registry that collects them either way. Empty of vllm:* with --disable-log-stats."""
        return get_prometheus_registry()

    @property
    def errored(self) -> bool:
        return self._llm.errored

    def shutdown(self) -> None:
        self._llm.shutdown()

    async def _utility(self, name: str) -> Any:
        return await self._guarded(f"utility call {name}", self._llm.engine_core.call_utility_async(name))

    async def _guarded(self, name: str, call: Any) -> Any:
        try:
            return await self.calls.call(name, call)
        except EngineDeadError as error:
            raise EngineDead("the engine has died") from error


def full_size_shape(max_num_batched_tokens: int, max_num_seqs: int, max_model_len: int) -> tuple[int, int]:
    """(nonces, seq_len) of a batch as large as the engine's step: no more sequences than one step takes (vLLM
    sizes attention buffers by it: on an H200, FlashAttention 3's metadata build failed on 16-token nonces filling
    the step, more sequences than max_num_seqs), each at least PREPARE_SEQ_LEN tokens and at most the context
    (a nonce's KV blocks fill one row of the block table). With few sequences and a short context, the batch is
    as large as those allow."""
    nonces = max(2, min(max_num_seqs, max_num_batched_tokens // PREPARE_SEQ_LEN))
    return nonces, min(max_model_len, max(PREPARE_SEQ_LEN, max_num_batched_tokens // nonces))
