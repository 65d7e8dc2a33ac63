"""engine_ext.plugin.plugin_not_loadable: the server refuses to start an engine that vLLM would start without this
project's plugin (the e2e side: tests/e2e/test_process_lifecycle.py), and the engine core's own report after
start (MlnodeEngine.require_extension) stays the final word."""

from __future__ import annotations

import asyncio
from importlib import metadata
from types import SimpleNamespace

import pytest
import vllm.envs

from engine_ext import plugin
from engine_ext.engine import ExtensionMissing, MlnodeEngine
from engine_ext.engine_calls import EngineCalls


def test_the_installed_plugin_with_no_allow_list_is_loadable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vllm.envs, "VLLM_PLUGINS", None, raising=False)
    assert plugin.plugin_not_loadable() is None


def test_an_allow_list_must_name_the_plugin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vllm.envs, "VLLM_PLUGINS", ["lora_filesystem_resolver", "gonka_mlnode"], raising=False)
    assert plugin.plugin_not_loadable() is None
    monkeypatch.setattr(vllm.envs, "VLLM_PLUGINS", [""], raising=False)  # VLLM_PLUGINS="": no plugin at all
    assert "VLLM_PLUGINS='' leaves out the gonka_mlnode vLLM plugin" in (plugin.plugin_not_loadable() or "")


def test_a_missing_entry_point_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vllm.envs, "VLLM_PLUGINS", None, raising=False)
    others = [point for point in metadata.entry_points(group=plugin.PLUGIN_GROUP) if point.name != plugin.PLUGIN_NAME]
    monkeypatch.setattr(metadata, "entry_points", lambda group: others if group == plugin.PLUGIN_GROUP else [])
    assert "no entry point gonka_mlnode in vllm.general_plugins" in (plugin.plugin_not_loadable() or "")


def test_an_engine_core_without_the_plugin_is_refused_after_start() -> None:
    async def call_utility_async(method: str, *args: object) -> object:
        raise RuntimeError(f"Call to {method} method failed: the engine core has no such method")

    engine = MlnodeEngine.__new__(MlnodeEngine)
    engine.calls = EngineCalls(5.0, 10.0)
    engine._llm = SimpleNamespace(engine_core=SimpleNamespace(call_utility_async=call_utility_async))  # type: ignore[attr-defined]
    with pytest.raises(ExtensionMissing, match="not active in the engine core"):
        asyncio.run(engine.require_extension())
