"""The running engine as the server sees it: vLLM's AsyncLLM plus the extension's own calls.

Generation and aborts go straight to `llm` (vLLM's public AsyncLLM API); what vLLM has no public
call for (the scheduler's live state, the plugin's per-process report) goes through the utility and
collective-RPC methods the plugin registers, so the server never touches vLLM internals itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vllm.v1.engine.async_llm import AsyncLLM


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
