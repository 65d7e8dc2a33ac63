"""The running engine as the server sees it: vLLM's AsyncLLM plus the extension's own calls.

Generation goes through vLLM's AsyncLLM.generate, or through the lean token streams
(engine_ext.token_streams) for requests that want token ids and logprobs only; aborts reach both.
What vLLM has no public call for (the scheduler's live state, the plugin's per-process report) goes
through the utility and collective-RPC methods the plugin registers, so the server never touches
vLLM internals itself.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection
from dataclasses import dataclass
from typing import Any

from vllm.inputs import PromptType
from vllm.outputs import RequestOutput
from vllm.sampling_params import SamplingParams
from vllm.v1.engine.async_llm import AsyncLLM

from engine_ext.token_streams import TokenDelta, TokenStreams, token_stream_possible


class ExtensionMissing(RuntimeError):
    pass


@dataclass(frozen=True)
class SchedulerState:
    running: int
    waiting: int
    # Requests the engine core still tracks (running, waiting or preempted).
    unfinished: int
    kv_cache_usage: float


class MlnodeEngine:
    def __init__(self, llm: AsyncLLM) -> None:
        self.llm = llm
        self.token_streams = TokenStreams(llm)
        self.token_streams.install()

    def generate(self, prompt: PromptType, params: SamplingParams, request_id: str) -> AsyncIterator[RequestOutput | TokenDelta]:
        """The request's outputs until it finishes; ValueError (before the first) on bad input."""
        if self.token_streams.enabled and token_stream_possible(params):
            return self.token_streams.outputs(request_id, prompt, params)
        return self.llm.generate(prompt, params, request_id)

    async def abort(self, request_ids: Collection[str]) -> None:
        """Ends the requests (given by their client-side ids) with finish reason abort."""
        streams = self.token_streams.streams_of(request_ids)
        await self.token_streams.abort(streams)
        streamed = {stream.external_request_id for stream in streams}
        others = [request_id for request_id in request_ids if request_id not in streamed]
        if others:
            await self.llm.abort(others)

    async def scheduler_state(self) -> SchedulerState:
        state = await self.llm.engine_core.call_utility_async("mlnode_scheduler_state")
        return SchedulerState(**state)

    async def require_extension(self) -> None:
        """Fails unless the plugin ran in the engine core (VLLM_PLUGINS can exclude it): without its
        seams the engine would serve, but wrongly."""
        try:
            await self.engine_core_report()
        except Exception as error:
            raise ExtensionMissing(
                "the gonka_mlnode vLLM plugin is not active in the engine core; if VLLM_PLUGINS is set, "
                f"it must include gonka_mlnode ({error})"
            ) from error

    async def engine_core_report(self) -> dict[str, Any]:
        return await self.llm.engine_core.call_utility_async("mlnode_process_report")

    async def worker_reports(self) -> list[dict[str, Any]]:
        return await self.llm.collective_rpc("mlnode_process_report")

    @property
    def errored(self) -> bool:
        return self.llm.errored

    def shutdown(self) -> None:
        self.llm.shutdown()
