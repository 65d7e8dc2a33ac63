"""The plugin refuses any vLLM release its seams were not verified against."""

from __future__ import annotations

import pytest
import vllm

from engine_ext.vllm_version import UnsupportedVllmVersion, require_supported_vllm, require_v1_model_runner


@pytest.mark.parametrize("version", ["0.15.1", "0.15.1+cpu", "0.15.1+cu128", "0.20.1", "0.20.1+cpu", "0.20.1+cu130"])
def test_the_verified_releases_are_accepted(version: str) -> None:
    require_supported_vllm(version)


@pytest.mark.parametrize("version", ["0.20.0", "0.20.2", "0.15.0", "0.16.0rc1", "0.15.2", "0.21.0"])
def test_other_releases_are_refused_with_a_clear_message(version: str) -> None:
    with pytest.raises(UnsupportedVllmVersion, match=rf"supports vLLM 0\.15\.1, 0\.20\.1 only, but vLLM {version} is installed"):
        require_supported_vllm(version)


def test_the_plugin_entry_point_refuses_another_vllm(monkeypatch: pytest.MonkeyPatch) -> None:
    from engine_ext.plugin import register

    monkeypatch.setattr(vllm, "__version__", "0.20.0")
    with pytest.raises(UnsupportedVllmVersion, match="0.20.0"):
        register()


def test_the_engine_factory_refuses_before_starting_anything(monkeypatch: pytest.MonkeyPatch) -> None:
    from vllm.engine.arg_utils import AsyncEngineArgs

    from engine_ext import engine_factory
    from engine_ext.engine_args import EngineSettings
    from engine_ext.engine_calls import EngineCalls

    # The arguments are built first: building them runs the plugin, which checks the version too.
    settings = EngineSettings(AsyncEngineArgs(model="/nonexistent"))
    monkeypatch.setattr(vllm, "__version__", "0.16.0")
    with pytest.raises(UnsupportedVllmVersion, match="0.16.0"):
        engine_factory.create_engine(settings, EngineCalls(1.0, 5.0))


def test_the_v2_model_runner_is_refused() -> None:
    with pytest.raises(UnsupportedVllmVersion, match="VLLM_USE_V2_MODEL_RUNNER"):
        require_v1_model_runner(True)
