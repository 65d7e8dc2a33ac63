"""The plugin refuses any vLLM release its seams were not verified against."""

from __future__ import annotations

import pytest
import vllm

from engine_ext.seams.vllm_version import UnsupportedVllmVersion, require_supported_vllm, require_v1_model_runners


@pytest.mark.parametrize("version", ["0.25.1", "0.25.1+cpu", "0.25.1+cu130", "0.28.0", "0.28.0+cpu", "0.28.0+cu130"])
def test_the_verified_releases_are_accepted(version: str) -> None:
    require_supported_vllm(version)


@pytest.mark.parametrize("version", ["0.15.1", "0.20.1", "0.30.0", "0.25.0", "0.25.2", "0.28.1", "0.28.0rc1", "0.26.0"])
def test_other_releases_are_refused_with_a_clear_message(version: str) -> None:
    with pytest.raises(
        UnsupportedVllmVersion, match=rf"supports vLLM 0\.25\.1, 0\.28\.0 only, but vLLM {version} is installed"
    ):
        require_supported_vllm(version)


def test_the_plugin_entry_point_refuses_another_vllm(monkeypatch: pytest.MonkeyPatch) -> None:
    from engine_ext.plugin import register

    monkeypatch.setattr(vllm, "__version__", "0.20.0")
    with pytest.raises(UnsupportedVllmVersion, match=r"0\.20\.0"):
        register()


def test_the_engine_factory_refuses_before_starting_anything(monkeypatch: pytest.MonkeyPatch) -> None:
    from vllm.engine.arg_utils import AsyncEngineArgs

    from engine_ext import engine_factory
    from engine_ext.engine_args import EngineSettings
    from engine_ext.engine_calls import EngineCalls

    # The arguments are built first: building them runs the plugin, which checks the version too.
    settings = EngineSettings(AsyncEngineArgs(model="/nonexistent"))
    monkeypatch.setattr(vllm, "__version__", "0.16.0")
    with pytest.raises(UnsupportedVllmVersion, match=r"0\.16\.0"):
        engine_factory.create_engine(settings, EngineCalls(1.0, 5.0))


def test_a_v2_model_runner_built_by_any_worker_is_refused_by_name() -> None:
    v1 = {"model_runner": "vllm.v1.worker.cpu_model_runner.CPUModelRunner", "v1_model_runner": True}
    v2 = {"model_runner": "vllm.v1.worker.gpu.model_runner.GPUModelRunner", "v1_model_runner": False}
    require_v1_model_runners([v1, v1])
    with pytest.raises(
        UnsupportedVllmVersion,
        match=r"model runner vllm\.v1\.worker\.gpu\.model_runner\.GPUModelRunner.*V1 model runner",
    ):
        require_v1_model_runners([v1, v2])


def test_the_runner_report_tells_vllms_v1_runners_from_the_v2_ones() -> None:
    """Read off vLLM's own classes: a V1 runner of any platform derives from the GPU V1 runner, a V2 runner does not."""
    from vllm.v1.worker.cpu_model_runner import CPUModelRunner
    from vllm.v1.worker.gpu.model_runner import GPUModelRunner as GPUModelRunnerV2

    from engine_ext.process_report import describe_model_runner

    v1 = describe_model_runner(CPUModelRunner.__new__(CPUModelRunner))
    v2 = describe_model_runner(GPUModelRunnerV2.__new__(GPUModelRunnerV2))
    assert v1 == {"model_runner": "vllm.v1.worker.cpu_model_runner.CPUModelRunner", "v1_model_runner": True}
    assert v2 == {"model_runner": "vllm.v1.worker.gpu.model_runner.GPUModelRunner", "v1_model_runner": False}
