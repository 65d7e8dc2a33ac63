"""Engine-core utility calls the plugin adds to vLLM's EngineCore (additive, nothing wrapped).

The frontend reaches them with `engine_core.call_utility_async(name)`; the engine core runs them
between steps, in order with aborts and new requests, so what they report is the scheduler's
state after everything sent before them.
"""

from __future__ import annotations

from typing import Any

UTILITY_MARK = "__gonka_mlnode_utility__"


def add_engine_core_utilities() -> None:
    from vllm.v1.engine.core import EngineCore

    from engine_ext.poc.block_lease import poc_forward_on_borrowed_blocks

    utilities = (
        ("mlnode_scheduler_state", _scheduler_state),
        ("mlnode_process_report", _process_report),
        ("mlnode_poc_forward", poc_forward_on_borrowed_blocks),
    )
    for name, function in utilities:
        if not getattr(getattr(EngineCore, name, None), UTILITY_MARK, False):
            setattr(function, UTILITY_MARK, True)
            setattr(EngineCore, name, function)


def _scheduler_state(engine_core: Any) -> dict[str, Any]:
    scheduler = engine_core.scheduler
    return {
        "running": len(scheduler.running),
        "waiting": len(scheduler.waiting),
        "unfinished": len(scheduler.requests),
        "kv_cache_usage": float(scheduler.kv_cache_manager.usage),
    }


def _process_report(engine_core: Any) -> dict[str, Any]:
    from engine_ext.process_report import describe_this_process

    return describe_this_process()
