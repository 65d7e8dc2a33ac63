"""Per configuration kind: how it is started, and which configurations (load clients) run on it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from types import MappingProxyType

from benchmarks.serving.configuration import Configuration, Live
from benchmarks.serving.kinds import OFFLINE
from benchmarks.serving.launcher import LiveServer, running_server
from benchmarks.serving.measurement import streamed
from benchmarks.serving.offline_process import LiveOffline, running_offline
from benchmarks.serving.offline_rounds import offline_configuration
from benchmarks.serving.openai_driver import openai_scenarios
from benchmarks.serving.ours_driver import ours_scenarios
from benchmarks.serving.settings import Settings
from benchmarks.serving.streams import Scenario
from benchmarks.serving.vllm_grpc_driver import vllm_grpc_scenarios
from benchmarks.serving.workload import Workload

ScenarioBuilder = Callable[[AsyncExitStack, LiveServer, Workload], Awaitable[list[Scenario]]]
SCENARIO_BUILDERS: MappingProxyType[str, ScenarioBuilder] = MappingProxyType(
    {"ours": ours_scenarios, "openai": openai_scenarios, "vllm-grpc": vllm_grpc_scenarios}
)


@asynccontextmanager
async def started(kind: str, settings: Settings) -> AsyncIterator[Live]:
    """Loaded and ready. A server's startup blocks the event loop on purpose: nothing else runs then."""
    if kind == OFFLINE:
        async with running_offline(settings) as offline:
            yield offline
    else:
        with running_server(kind, settings) as server:
            yield server


async def configurations(
    clients: AsyncExitStack, live: Live, workload: Workload, settings: Settings
) -> list[Configuration]:
    """`clients` holds the load clients' connections, closed before their server stops."""
    if isinstance(live, LiveOffline):
        return [offline_configuration(live, workload)]
    assert isinstance(live, LiveServer)
    scenarios = await SCENARIO_BUILDERS[live.kind](clients, live, workload)
    return [streamed(scenario, workload, settings.ttft_rounds) for scenario in scenarios]
