"""Which load client drives which server kind."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from types import MappingProxyType

from benchmarks.serving.launcher import LiveServer
from benchmarks.serving.openai_driver import openai_scenarios
from benchmarks.serving.ours_driver import ours_scenarios
from benchmarks.serving.streams import Scenario
from benchmarks.serving.vllm_grpc_driver import vllm_grpc_scenarios
from benchmarks.serving.workload import Workload

ScenarioBuilder = Callable[[AsyncExitStack, LiveServer, Workload], Awaitable[list[Scenario]]]
SCENARIO_BUILDERS: MappingProxyType[str, ScenarioBuilder] = MappingProxyType(
    {"ours": ours_scenarios, "openai": openai_scenarios, "vllm-grpc": vllm_grpc_scenarios}
)
