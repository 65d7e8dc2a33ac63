"""Token streams: a lean frontend path for requests that want token ids and logprobs only.

vLLM's frontend hands every engine step of every request through its OutputProcessor (request
state, detokenizer, a RequestOutput with a CompletionOutput and per-position logprob objects), an
output collector woken through an asyncio.Event, and the generate() async generator. A request
that wants no text, one output and no prompt logprobs (the network's validation traffic, and most
inference) needs none of that. Token streams take such requests from the engine core's outputs
straight to the consuming task: the tokens and the engine's own logprob arrays are appended to the
request's stream and the task is woken through one future.

What stays vLLM's: input processing and validation (InputProcessor), scheduling, the engine core,
the output handler task, and the step statistics vLLM's stat loggers read. By default a token
stream adds only its token counts to them (vLLM's periodic throughput log line); with request
metrics on (the server's --metrics-port), it records each output as vLLM's OutputProcessor records
its own requests' (the seam record_token_stream_step), so vLLM's Prometheus metrics (request
counts, time to first token, inter-token and end-to-end latency...) count both paths alike. The
hook is the seam token_streams on vLLM's OutputProcessor (`install_token_streams_seam`, put in place with the other
seams), which routes the outputs of the streams an AsyncLLM's processor carries (`TokenStreams.install`) away before
vLLM's processing sees them.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Iterable
from typing import Any

from vllm.sampling_params import RequestOutputKind, SamplingParams
from vllm.v1.engine import EngineCoreOutput, EngineCoreRequest
from vllm.v1.engine.async_llm import AsyncLLM
from vllm.v1.engine.exceptions import EngineDeadError
from vllm.v1.metrics.stats import IterationStats

from engine_ext.generation.errors import EngineDead, EngineError, RequestFailed
from engine_ext.generation.logprob_padding import pad_masked_entries
from engine_ext.generation.outputs import Finish, FinishReason, GenerationStep, LogprobColumns, OutputDelta
from engine_ext.generation.packed_logprobs import PACKED_LOGPROBS_KEY, pack, unpack
from engine_ext.generation.request_outputs import finish_reason
from engine_ext.seams import seams_for_installed_vllm, token_stream_request_stats
from engine_ext.seams.common import TOKEN_STREAMS, mark, seam_in_place

# Where TokenStreams.install leaves the processor's token streams for the seam to find.
STREAMS_ATTRIBUTE = "_gonka_mlnode_token_streams"


def stream_failure(error: Exception) -> EngineError:
    """What a stream's consumer gets when vLLM's output handler fails: the project's own error."""
    failure = (
        EngineDead("the engine has died")
        if isinstance(error, EngineDeadError)
        else RequestFailed(f"the engine failed: {error!r}")
    )
    failure.__cause__ = error
    return failure


def token_stream_possible(params: SamplingParams) -> bool:
    """Requests this path serves exactly: streamed, one output, no text, no prompt logprobs."""
    return (
        params.output_kind == RequestOutputKind.DELTA
        and params.n == 1
        and not params.detokenize
        and not params.stop
        and params.prompt_logprobs is None
    )


class TokenStream:
    """One request's undelivered output: the output handler appends, the request's task takes."""

    def __init__(
        self,
        engine_request_id: str,
        external_request_id: str,
        prompt_length: int,
        top_logprobs: int | None,
        pad_masked: bool = False,
        request_stats: Any | None = None,
        max_tokens: int | None = None,
    ) -> None:
        self.engine_request_id = engine_request_id
        self.external_request_id = external_request_id
        self.prompt_length = prompt_length
        self.top_logprobs = top_logprobs
        # Processed-mode logprobs: masked top-k entries take the lowest ids (engine_ext.generation.logprob_padding).
        self.pad_masked = pad_masked
        # vLLM's per-request statistics state, when request metrics are on (else only tokens are counted).
        self.request_stats = request_stats
        self.max_tokens = max_tokens
        self.prefilling = True
        self.done = False  # the final output (finish or error) has been appended
        self._token_ids: list[int] = []
        self._packed_logprobs: list[tuple[int, bytes]] = []
        self._finish_reason: FinishReason | None = None
        self._stop_reason: int | str | None = None
        # Prompt tokens served from the prefix cache, as the engine core last reported them.
        self.num_cached_tokens = 0
        self._error: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None

    def append(self, output: EngineCoreOutput) -> None:
        positions = output.new_token_ids
        self._token_ids.extend(positions)
        transferred = output.kv_transfer_params
        if transferred is not None and PACKED_LOGPROBS_KEY in transferred:
            self._packed_logprobs.append((len(positions), transferred[PACKED_LOGPROBS_KEY]))
        elif output.new_logprobs is not None:  # an engine core without the packing seam
            self._packed_logprobs.append((len(positions), pack(output.new_logprobs)))
        if output.finish_reason is not None:
            self._finish(finish_reason(output.finish_reason), output.stop_reason)
        else:
            self._wake()

    def abort(self) -> None:
        if not self.done:
            self._finish(FinishReason.ABORT, None)

    def fail(self, error: BaseException) -> None:
        if not self.done:
            self.done = True
            self._error = error
            self._wake()

    def _finish(self, reason: FinishReason, stop_reason: int | str | None) -> None:
        self.done = True
        self._finish_reason = reason
        self._stop_reason = stop_reason
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    async def next_step(self, loop: asyncio.AbstractEventLoop) -> GenerationStep:
        """Waits for output, then takes all of it (merged, when several steps arrived meanwhile)."""
        while not self._token_ids and not self.done:
            self._waiter = loop.create_future()
            await self._waiter
        if self._error is not None:
            raise self._error
        token_ids, packed = self._token_ids, self._packed_logprobs
        self._token_ids, self._packed_logprobs = [], []
        k = self.top_logprobs
        columns = LogprobColumns(*unpack(packed, k)) if k is not None and token_ids else None
        if columns is not None and k is not None and self.pad_masked:
            pad_masked_entries(columns, k)
        finish = None
        if self._finish_reason is not None:
            finish = Finish(self._finish_reason, self._stop_reason, self.prompt_length, self.num_cached_tokens)
        return GenerationStep([OutputDelta(0, token_ids, columns, "", finish)], finish is not None)


class TokenStreams:
    """The AsyncLLM's token streams, by engine request id."""

    def __init__(self, llm: AsyncLLM, request_metrics: bool = False) -> None:
        """`request_metrics`: record each stream's outputs as vLLM records its own requests' (about
        2 µs per token, what vLLM's path spends on it), not only its token counts."""
        self._llm = llm
        self._streams: dict[str, TokenStream] = {}
        # Only where vLLM keeps statistics at all (not with --disable-log-stats).
        self._request_metrics = request_metrics and llm.log_stats
        # The step-statistics seams of this vLLM's minor, looked up once (they run per output).
        self._seams = seams_for_installed_vllm()

    @property
    def enabled(self) -> bool:
        # vLLM's --stream-interval batches a stream's outputs; the lean path does not, so it stands aside.
        return self._llm.output_processor.stream_interval <= 1

    def install(self) -> None:
        """Routes the streams' outputs, and the output handler's failure, of this AsyncLLM's OutputProcessor through
        this object (the seam token_streams, put in place by the plugin, reads it off the processor)."""
        install_token_streams_seam()
        setattr(self._llm.output_processor, STREAMS_ATTRIBUTE, self)

    async def open(self, request_id: str, request: EngineCoreRequest, pad_masked: bool) -> TokenStream:
        """Submits a validated request (as AsyncLLM.add_request does after validating it); its
        sampling params must have asked for packed logprobs (request_packed_logprobs)."""
        llm = self._llm
        llm.input_processor.assign_request_id(request)
        llm._run_output_handler()  # started lazily by vLLM on its first request
        params = request.sampling_params
        assert params is not None  # a generation request (a pooling one has no sampling params)
        stream = TokenStream(
            request.request_id,
            request_id,
            len(request.prompt_token_ids or ()),
            params.logprobs,
            pad_masked,
            token_stream_request_stats(request.arrival_time) if self._request_metrics else None,
            params.max_tokens,
        )
        self._streams[stream.engine_request_id] = stream
        try:
            await llm.engine_core.add_request_async(request)
        except BaseException:
            del self._streams[stream.engine_request_id]
            raise
        return stream

    async def outputs(self, stream: TokenStream) -> AsyncGenerator[GenerationStep, None]:
        """The stream's steps until its finish; leaving early (cancellation, close) aborts it in the engine."""
        loop = asyncio.get_running_loop()
        try:
            while True:
                step = await stream.next_step(loop)
                yield step
                if step.finished:
                    return
        finally:
            if not stream.done:
                await self.abort([stream])

    def streams_of(self, external_request_ids: Iterable[str]) -> list[TokenStream]:
        wanted = set(external_request_ids)
        return [stream for stream in self._streams.values() if stream.external_request_id in wanted]

    def all_streams(self) -> list[TokenStream]:
        return list(self._streams.values())

    async def abort(self, streams: list[TokenStream]) -> None:
        """Ends the streams with finish reason abort and frees their engine requests."""
        for stream in streams:
            stream.abort()
            self._streams.pop(stream.engine_request_id, None)
        if streams and not self._llm.errored:
            await self._llm.engine_core.abort_requests_async([stream.engine_request_id for stream in streams])

    def _deliver(
        self,
        outputs: list[EngineCoreOutput],
        engine_core_timestamp: float | None,
        iteration_stats: IterationStats | None,
    ) -> list[EngineCoreOutput]:
        """Appends the streams' outputs to them; returns the others, for vLLM's own processing."""
        streams = self._streams
        others: list[EngineCoreOutput] = []
        for output in outputs:
            stream = streams.get(output.request_id)
            if stream is None:
                others.append(output)
                continue
            cached = self._seams.cached_prompt_tokens(output)
            if cached is not None:
                stream.num_cached_tokens = cached
            if iteration_stats is not None:
                if stream.request_stats is not None:
                    self._seams.record_token_stream_step(
                        iteration_stats,
                        output,
                        stream.external_request_id,
                        engine_core_timestamp,
                        stream.request_stats,
                        stream.prefilling,
                        stream.prompt_length,
                        stream.max_tokens,
                        stream.num_cached_tokens,
                        self._llm.output_processor.lora_states,
                    )
                else:
                    self._seams.count_token_stream_tokens(
                        iteration_stats, output, stream.prefilling, stream.prompt_length
                    )
            stream.prefilling = False
            stream.append(output)
            if stream.done:
                del streams[output.request_id]
        return others

    def _fail(self, error: Exception) -> None:
        streams, self._streams = list(self._streams.values()), {}
        failure = stream_failure(error)
        for stream in streams:
            stream.fail(failure)


def install_token_streams_seam() -> None:
    """The seam token_streams: vLLM's OutputProcessor hands the outputs of a processor's token streams (the TokenStreams
    that `TokenStreams.install` attached to it) to them before its own processing, and fails them when the output
    handler fails. On the class, like every seam, so the installed-seams report reads it off the patched method; a
    processor without token streams (any other process) goes straight to vLLM's code."""
    from vllm.v1.engine.output_processor import OutputProcessor

    if seam_in_place(OutputProcessor.process_outputs, TOKEN_STREAMS):
        return
    process_outputs = OutputProcessor.process_outputs
    propagate_error = OutputProcessor.propagate_error

    def process_outputs_and_streams(
        processor: OutputProcessor,
        engine_core_outputs: list[EngineCoreOutput],
        engine_core_timestamp: float | None = None,
        iteration_stats: IterationStats | None = None,
    ) -> Any:
        streams: TokenStreams | None = getattr(processor, STREAMS_ATTRIBUTE, None)
        if streams is not None and streams._streams:
            engine_core_outputs = streams._deliver(engine_core_outputs, engine_core_timestamp, iteration_stats)
        return process_outputs(processor, engine_core_outputs, engine_core_timestamp, iteration_stats)

    def propagate_error_to_streams(processor: OutputProcessor, error: Exception) -> None:
        streams: TokenStreams | None = getattr(processor, STREAMS_ATTRIBUTE, None)
        if streams is not None:
            streams._fail(error)
        propagate_error(processor, error)

    OutputProcessor.process_outputs = mark(process_outputs_and_streams, TOKEN_STREAMS, process_outputs)
    OutputProcessor.propagate_error = mark(propagate_error_to_streams, TOKEN_STREAMS, propagate_error)
