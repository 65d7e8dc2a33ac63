"""vLLM's engine arguments behind engine_ext: the parser, the default model and its KV-cache size,
and what the engine factory refuses or sets before the engine starts."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from vllm.config import StructuredOutputsConfig
from vllm.engine.arg_utils import AsyncEngineArgs
from vllm.platforms import current_platform

from engine_ext import engine_factory
from engine_ext.device_slices import CPU_BIND_VARIABLE, DeviceSlice
from engine_ext.engine_args import (
    CPU_DEFAULT_MAX_NUM_SEQS_PER_RANK,
    CPU_KV_CACHE_ENV,
    USAGE_CONTEXT,
    DefaultModel,
    EngineSettings,
    build_engine_parser,
    engine_args_from,
    kv_cache_gib_for_whole_context,
)
from server.options import add_server_arguments

# The embedded model's shape (server/embedded_model/builder.py): 512 bytes of KV per token.
TINY_QWEN3 = {
    "num_hidden_layers": 2,
    "num_key_value_heads": 2,
    "num_attention_heads": 4,
    "hidden_size": 128,
    "head_dim": 32,
    "max_position_embeddings": 8192,
}
needs_cpu = pytest.mark.skipif(not current_platform.is_cpu(), reason="VLLM_CPU_KVCACHE_SPACE is read on CPU only")


@pytest.fixture
def default_model(tmp_path: Path) -> DefaultModel:
    (tmp_path / "config.json").write_text(json.dumps(TINY_QWEN3))
    return DefaultModel("tiny-default", "the default model's help", lambda: tmp_path)


@pytest.fixture
def kv_cache_env_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    # setenv first, so that the variable's original state comes back after the test.
    monkeypatch.setenv(CPU_KV_CACHE_ENV, "0")
    monkeypatch.delenv(CPU_KV_CACHE_ENV)


def settings(default_model: DefaultModel, *argv: str) -> EngineSettings:
    parser = build_engine_parser("python -m server", "description", add_server_arguments, default_model)
    return engine_args_from(parser.parse_args(list(argv)), default_model)


def test_the_parser_takes_server_and_engine_flags_and_describes_the_default_model(default_model: DefaultModel) -> None:
    parser = build_engine_parser("python -m server", "description", add_server_arguments, default_model)
    namespace = parser.parse_args(["--port", "6000", "--max-model-len", "2048", "--engine-call-timeout", "3"])
    assert (namespace.port, namespace.max_model_len, namespace.engine_call_timeout) == (6000, 2048, 3.0)
    assert namespace.model is None  # not vLLM's hub default
    assert [action.help for action in parser._actions if "--model" in action.option_strings] == [
        "the default model's help"
    ]


@pytest.mark.parametrize(
    ("max_model_len", "max_num_seqs", "gib"),
    [(8192, 128, 1), (8192, 256, 1), (8192, 257, 2), (2048, 1024, 1), (8192, 1024, 4)],
)
def test_kv_cache_holds_the_whole_context_of_every_sequence(max_model_len: int, max_num_seqs: int, gib: int) -> None:
    assert kv_cache_gib_for_whole_context(TINY_QWEN3, max_model_len, max_num_seqs) == gib


def test_head_dim_defaults_to_hidden_size_over_heads() -> None:
    config = {key: value for key, value in TINY_QWEN3.items() if key != "head_dim"}
    config["hidden_size"] = 256  # head_dim 64: twice the bytes
    assert kv_cache_gib_for_whole_context(config, 8192, 256) == 2


@needs_cpu
def test_the_cpu_default_batch_size_is_vllms(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CPU_KV_CACHE_ENV, "1")  # without it vLLM warns about the unset variable
    _, default_max_num_seqs = AsyncEngineArgs.get_batch_defaults(world_size=2)
    assert default_max_num_seqs[USAGE_CONTEXT] == 2 * CPU_DEFAULT_MAX_NUM_SEQS_PER_RANK


@needs_cpu
@pytest.mark.usefixtures("kv_cache_env_unset")
def test_the_default_model_gets_a_kv_cache_for_its_context(default_model: DefaultModel, tmp_path: Path) -> None:
    served = settings(default_model)
    assert served.vllm_args.model == str(tmp_path)
    assert served.vllm_args.served_model_name == ["tiny-default"]
    assert served.environment == {CPU_KV_CACHE_ENV: "1"}
    assert settings(default_model, "--max-num-seqs", "1024").environment == {CPU_KV_CACHE_ENV: "4"}
    assert settings(default_model, "--served-model-name", "mine").vllm_args.served_model_name == ["mine"]


@needs_cpu
def test_a_kv_cache_size_in_the_environment_is_kept(
    default_model: DefaultModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CPU_KV_CACHE_ENV, "3")
    assert settings(default_model).environment == {}


@pytest.mark.usefixtures("kv_cache_env_unset")
def test_a_given_model_keeps_vllms_defaults(default_model: DefaultModel) -> None:
    served = settings(default_model, "--model", "/models/other")
    assert (served.vllm_args.model, served.vllm_args.served_model_name) == ("/models/other", None)
    assert served.environment == {}


def test_a_kv_connector_is_refused(default_model: DefaultModel) -> None:
    served = settings(
        default_model, "--kv-transfer-config", '{"kv_connector": "ExampleConnector", "kv_role": "kv_both"}'
    )
    with pytest.raises(engine_factory.EngineConfigurationError, match="--kv-transfer-config is not supported"):
        engine_factory.create_engine(served, calls=None)


@pytest.mark.usefixtures("kv_cache_env_unset")
def test_the_environment_is_set_before_the_engine_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, str | None] = {}

    class RecordingAsyncLLM:
        @staticmethod
        def from_engine_args(engine_args: AsyncEngineArgs, usage_context: object) -> str:
            seen["kv_cache"] = os.environ.get(CPU_KV_CACHE_ENV)
            seen["slice"] = os.environ.get(CPU_BIND_VARIABLE)
            return "llm"

    monkeypatch.setattr(engine_factory, "AsyncLLM", RecordingAsyncLLM)
    monkeypatch.setattr(
        engine_factory,
        "MlnodeEngine",
        lambda llm, calls, mode, request_metrics, poc_compiled, registry: (llm, calls, mode),
    )
    monkeypatch.delenv(CPU_BIND_VARIABLE, raising=False)
    args = AsyncEngineArgs(model="/m", structured_outputs_config=StructuredOutputsConfig(backend="xgrammar"))
    # The instance's device slice is set while its engine processes are spawned, and only then. PoC off: the
    # model's architecture is not read (there is no model at /m).
    device_slice = DeviceSlice(1, {CPU_BIND_VARIABLE: "1"})
    started = engine_factory.create_engine(
        EngineSettings(args, {CPU_KV_CACHE_ENV: "1"}), "calls", "mode", poc_enabled=False, device_slice=device_slice
    )
    assert started == ("llm", "calls", "mode")
    assert seen == {"kv_cache": "1", "slice": "1"}
    assert CPU_BIND_VARIABLE not in os.environ


@pytest.mark.parametrize("model_flags", [(), ("--model", "/models/other")], ids=["default-model", "given-model"])
def test_vllms_default_structured_output_backend_becomes_xgrammar(
    default_model: DefaultModel, model_flags: tuple[str, ...]
) -> None:
    served = settings(default_model, *model_flags, "--structured-outputs-config", '{"enable_in_reasoning": true}')
    config = served.vllm_args.structured_outputs_config
    assert (config.backend, config.enable_in_reasoning) == ("xgrammar", True)
    engine_factory.require_xgrammar_backend(served.vllm_args)  # passes the engine factory's check


def test_xgrammar_named_by_the_user_keeps_its_settings(default_model: DefaultModel) -> None:
    served = settings(
        default_model, "--structured-outputs-config", '{"backend": "xgrammar", "disable_any_whitespace": true}'
    )
    config = served.vllm_args.structured_outputs_config
    assert (config.backend, config.disable_any_whitespace) == ("xgrammar", True)


@pytest.mark.parametrize("backend", ["guidance", "outlines", "lm-format-enforcer"])
def test_another_structured_output_backend_is_refused_at_start(default_model: DefaultModel, backend: str) -> None:
    served = settings(default_model, "--structured-outputs-config", json.dumps({"backend": backend}))
    assert served.vllm_args.structured_outputs_config.backend == backend  # the user's choice is not overridden
    with pytest.raises(
        engine_factory.EngineConfigurationError, match=re.escape(f"backend {backend!r} is not supported")
    ) as caught:
        engine_factory.create_engine(served, calls=None)
    assert "grammar degradation during validation replays" in str(caught.value)


@pytest.mark.parametrize("model_flags", [(), ("--model", "/models/other")], ids=["default-model", "given-model"])
def test_vllms_default_max_logprobs_makes_room_for_both_modes_of_a_replay(
    default_model: DefaultModel, model_flags: tuple[str, ...]
) -> None:
    """A replay of unstated mode carries 2k + 1 logprobs (engine_ext.generation.both_logprobs_modes): k = 20 must fit."""
    assert settings(default_model, *model_flags).vllm_args.max_logprobs == 41
    assert (
        settings(default_model, *model_flags, "--max-logprobs", "8").vllm_args.max_logprobs == 8
    )  # an operator's value stands
