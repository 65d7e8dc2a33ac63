"""The PoC forward's decoders (engine_ext.poc.decoders): each against the architecture's own vLLM module where it can
be built on CPU (Qwen3, MiniMax-M2), DeepSeek-V4's against its layer structure (poc-v2-models.md section 4.3: its
vLLM model needs CUDA to construct, so its classes are read, and stand-in layers with their calling form run it);
the refusal of an architecture without a decoder; the last layer computed at the kept rows only."""

from __future__ import annotations

import ast
import importlib
import inspect
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from engine_ext.consensus import reflect
from engine_ext.poc.decoders import SUPPORTED_ARCHITECTURES, UnsupportedArchitecture, decoder_for
from engine_ext.poc.decoders.deepseek_v4 import DeepseekV4Decoder
from engine_ext.poc.decoders.residual_pair import ROW_WISE_AFTER_ATTENTION, ResidualPairDecoder
from engine_ext.poc.layer_stack import eager_last_layer, reflected_last_layer, run_stack
from engine_ext.poc.worker_forward import last_token_rows
from server.embedded_model import DEFAULT_MODEL_DIR
from server.embedded_model.variants import MINIMAX_M2_MODEL_DIR

# The body every listed layer's forward must have (the form ResidualPairDecoder.call_layer_on_rows writes out),
# MLP named as the layer names it.
EXPECTED_BODY = """
if residual is None:
    residual = hidden_states
    hidden_states = self.input_layernorm(hidden_states)
else:
    hidden_states, residual = self.input_layernorm(hidden_states, residual)
hidden_states = self.self_attn(positions=positions, hidden_states=hidden_states)
hidden_states, residual = self.post_attention_layernorm(hidden_states, residual)
hidden_states = self.MLP(hidden_states)
return hidden_states, residual
"""


def layer_class(name: str) -> type:
    module, _, qualname = name.rpartition(".")
    return getattr(importlib.import_module(module), qualname)


def body_dump(source: str) -> list[str]:
    return [ast.dump(statement) for statement in ast.parse(textwrap.dedent(source)).body]


def code_of(function: Any) -> list[ast.stmt]:
    (definition,) = ast.parse(textwrap.dedent(inspect.getsource(function))).body
    assert isinstance(definition, ast.FunctionDef)
    # Docstrings and comments aside.
    return [
        statement
        for statement in definition.body
        if not (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant))
    ]


@pytest.mark.parametrize("name", sorted(ROW_WISE_AFTER_ATTENTION))
def test_each_row_wise_layer_has_the_body_written_out(name: str) -> None:
    expected = EXPECTED_BODY.replace("self.MLP", f"self.{ROW_WISE_AFTER_ATTENTION[name]}")
    assert [ast.dump(statement) for statement in code_of(layer_class(name).forward)] == body_dump(expected)


# --- the architectures' own vLLM models, built on CPU ------------------------------------------------------------


@pytest.fixture(scope="module")
def vllm_models() -> Iterator[dict[str, Any]]:
    """vLLM's Qwen3 and MiniMax-M2 models of the embedded variants, with dummy weights, in one process group."""
    from vllm.config import set_current_vllm_config
    from vllm.distributed import cleanup_dist_env_and_memory, init_distributed_environment, initialize_model_parallel
    from vllm.engine.arg_utils import EngineArgs
    from vllm.model_executor.model_loader import get_model

    from tests.support.server_process import free_port

    built: dict[str, Any] = {}
    for model_dir in (DEFAULT_MODEL_DIR, MINIMAX_M2_MODEL_DIR):
        if not (Path(model_dir) / "build_info.json").is_file():
            pytest.fail(f"the embedded model is not built at {model_dir}: run `make test` (it builds it)")
        config = EngineArgs(
            model=str(model_dir), load_format="dummy", enforce_eager=True, max_model_len=256, max_num_batched_tokens=256
        ).create_engine_config()
        with set_current_vllm_config(config):
            if not built:
                init_distributed_environment(1, 0, f"tcp://127.0.0.1:{free_port()}", 0, "gloo")
                initialize_model_parallel(1, 1)
            model = get_model(vllm_config=config)
        built[type(model).__name__] = model
    yield built
    cleanup_dist_env_and_memory()


@pytest.mark.parametrize(
    ("architecture", "mlp"), [("Qwen3ForCausalLM", "mlp"), ("MiniMaxM2ForCausalLM", "block_sparse_moe")]
)
def test_the_residual_pair_decoder_reads_vllms_own_model(
    vllm_models: dict[str, Any], architecture: str, mlp: str
) -> None:
    model = vllm_models[architecture]
    decoder = decoder_for(model)
    assert isinstance(decoder, ResidualPairDecoder) and decoder.architecture == architecture
    assert decoder.layers == list(model.model.layers) and decoder.first_index == 0 and decoder.compiles
    assert decoder.decoder.norm is model.model.norm and not decoder.needs_input_ids
    # Rows past the attention are the layer's own MLP's (the body check above holds for this class).
    assert decoder._mlp_attribute == mlp and hasattr(decoder.layers[-1], mlp)
    # The stack is the model's own loop: islice(self.layers, start, end) calling layer(positions, hidden, residual)
    # from (inputs_embeds, None), then self.norm(hidden, residual).
    source = inspect.getsource(type(model.model).forward)
    assert "layer(positions, hidden_states, residual)" in source
    assert "self.norm(hidden_states, residual)" in source and "residual = None" in source


def test_an_architecture_without_a_decoder_is_refused_by_name() -> None:
    class LlamaForCausalLM(torch.nn.Module):
        pass

    with pytest.raises(UnsupportedArchitecture, match=r"no decoder for LlamaForCausalLM .*--poc-forward off"):
        decoder_for(LlamaForCausalLM())
    assert {"Qwen3ForCausalLM", "Qwen3MoeForCausalLM", "MiniMaxM2ForCausalLM", "DeepseekV4ForCausalLM"} <= set(
        SUPPORTED_ARCHITECTURES
    )


def test_a_layer_called_otherwise_is_refused() -> None:
    class Layer(torch.nn.Module):
        def forward(self, hidden_states: torch.Tensor, positions: torch.Tensor, residual: torch.Tensor | None) -> Any:
            return hidden_states, residual

    model = SimpleNamespace(model=SimpleNamespace(layers=[Layer()], norm=torch.nn.Identity()))
    with pytest.raises(
        UnsupportedArchitecture, match=r"Layer.forward takes \['hidden_states', 'positions', 'residual'\]"
    ):
        ResidualPairDecoder(model)


# --- the last layer at the kept rows --------------------------------------------------------------------------------


class Norm(torch.nn.Module):
    """vLLM's RMSNorm calling form: norm(x) -> y, norm(x, residual) -> (y, x + residual)."""

    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = scale

    def forward(
        self, x: torch.Tensor, residual: torch.Tensor | None = None
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        if residual is None:
            return x * self.scale
        total = x + residual
        return total * self.scale, total


class PrefixAttention(torch.nn.Module):
    """Mixes rows as attention does: each row sees the running sum of the rows before it."""

    def forward(self, positions: torch.Tensor, hidden_states: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(hidden_states, dim=0) + positions[:, None]


def stand_in_layer(name: str) -> torch.nn.Module:
    """A layer whose class has the listed name and vLLM's own forward, on stand-in submodules."""
    cls = layer_class(name)
    stand_in_class = type(
        cls.__name__,
        (torch.nn.Module,),
        {"forward": cls.forward, "__module__": cls.__module__, "__qualname__": cls.__qualname__},
    )
    layer = stand_in_class()
    layer.input_layernorm, layer.post_attention_layernorm = Norm(0.5), Norm(3.0)
    layer.self_attn = PrefixAttention()
    setattr(layer, ROW_WISE_AFTER_ATTENTION[name], torch.nn.Tanh())
    return layer


def stand_in_decoder(layers: list[torch.nn.Module]) -> ResidualPairDecoder:
    return ResidualPairDecoder(SimpleNamespace(model=SimpleNamespace(layers=layers, norm=Norm(2.0))))


@pytest.mark.parametrize("name", sorted(ROW_WISE_AFTER_ATTENTION))
@pytest.mark.parametrize("first_layer", [True, False], ids=["first", "later"])
def test_the_split_equals_the_layers_own_forward_at_the_kept_rows(name: str, first_layer: bool) -> None:
    layer = stand_in_layer(name)
    decoder = stand_in_decoder([layer])
    generator = torch.Generator().manual_seed(7)
    hidden = torch.randn(12, 5, generator=generator)
    residual = None if first_layer else torch.randn(12, 5, generator=generator)
    positions = torch.arange(12) % 4
    rows = last_token_rows(3, 4, torch.device("cpu"))
    whole_hidden, whole_residual = layer(positions, hidden, residual)
    kept_hidden, kept_residual = decoder.call_layer_on_rows(layer, positions, None, (hidden, residual), rows)
    assert torch.equal(kept_hidden, whole_hidden[rows])
    assert torch.equal(kept_residual, whole_residual[rows])
    # The attention mixed rows: the kept rows differ from a forward of those rows alone.
    alone, _ = layer(positions[rows], hidden[rows], None if residual is None else residual[rows])
    assert not torch.equal(alone, kept_hidden)


def test_the_split_leaves_an_unlisted_layer_whole() -> None:
    calls: list[int] = []

    class OtherLayer(torch.nn.Module):
        def forward(
            self, positions: torch.Tensor, hidden_states: torch.Tensor, residual: torch.Tensor | None
        ) -> tuple[torch.Tensor, torch.Tensor]:
            calls.append(hidden_states.shape[0])
            return torch.cumsum(hidden_states, dim=0), hidden_states if residual is None else residual

    layer = OtherLayer()
    hidden = torch.arange(8.0).view(4, 2)
    rows = torch.tensor([1, 3])
    kept_hidden, kept_residual = stand_in_decoder([layer]).call_layer_on_rows(
        layer, torch.arange(4), None, (hidden, None), rows
    )
    assert calls == [4]
    assert torch.equal(kept_hidden, torch.cumsum(hidden, dim=0)[rows])
    assert torch.equal(kept_residual, hidden[rows])


def test_the_stack_reflects_after_every_layer_and_the_compiled_last_step_equals_the_eager_one() -> None:
    name = "vllm.model_executor.models.minimax_m2.MiniMaxM2DecoderLayer"
    decoder = stand_in_decoder([stand_in_layer(name) for _ in range(3)])
    generator = torch.Generator().manual_seed(9)
    inputs = torch.randn(8, 5, generator=generator)
    vectors = torch.nn.functional.normalize(torch.randn(3, 5, generator=generator), dim=-1)
    positions, rows = torch.arange(8) % 4, last_token_rows(2, 4, torch.device("cpu"))
    eager = run_stack(decoder, positions, inputs, None, vectors, rows)
    assert torch.allclose(
        run_stack(decoder, positions, inputs, None, vectors, rows, last_step=reflected_last_layer), eager
    )
    # Written out: each layer, then the reflection of both parts of its output, then the final norm.
    hidden, residual = inputs, None
    for layer, vector in zip(decoder.layers, vectors):
        hidden, residual = layer(positions, hidden, residual)
        hidden, residual = reflect(hidden, vector), reflect(residual, vector)
    assert torch.allclose(eager, decoder.decoder.norm(hidden, residual)[0][rows])
    unreflected = run_stack(
        decoder, positions, inputs, None, torch.zeros_like(vectors), rows, last_step=eager_last_layer
    )
    assert not torch.allclose(unreflected, eager)


def test_last_token_rows() -> None:
    cpu = torch.device("cpu")
    assert last_token_rows(3, 4, cpu).tolist() == [3, 7, 11]
    # A lone sequence's row goes twice: the compiled stack is dynamic in the row count from 2 on.
    assert last_token_rows(1, 5, cpu).tolist() == [4, 4]


# --- DeepSeek-V4: its layer structure --------------------------------------------------------------------------------

STREAMS, HIDDEN, TOKENS = 4, 6, 10


class HyperConnectionLayer(torch.nn.Module):
    """DeepSeek-V4's calling form: layer(x, positions, input_ids, post_mix, res_mix, residual) -> (x [T, H],
    residual [T, 4, H], post_mix [T, 4], res_mix [T, 4, 4]), hc_post of the previous layer deferred into this one.
    Linear stand-ins for vLLM's TileLang mHC kernels and its attention and experts; records what it got."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        self.mix = torch.randn(STREAMS, STREAMS, generator=generator) * 0.3
        self.weight = torch.randn(HIDDEN, HIDDEN, generator=generator) * 0.3
        self.seen: list[dict[str, Any]] = []

    def forward(
        self,
        x: torch.Tensor,
        positions: torch.Tensor,
        input_ids: torch.Tensor | None,
        post_mix: torch.Tensor | None = None,
        res_mix: torch.Tensor | None = None,
        residual: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, ...]:
        self.seen.append(
            {"x": x, "input_ids": input_ids, "post_mix": post_mix, "res_mix": res_mix, "residual": residual}
        )
        if residual is None:
            residual = x
        else:  # the previous layer's deferred hc_post
            residual = post_mix.unsqueeze(-1) * x.unsqueeze(-2) + torch.einsum("tij,tjh->tih", res_mix, residual)
        collapsed = residual.mean(dim=1)
        routed = collapsed @ self.weight + input_ids.float().unsqueeze(-1)
        post = torch.sigmoid(collapsed[:, :STREAMS])
        mixes = self.mix.expand(x.shape[0], STREAMS, STREAMS)
        return torch.tanh(routed), residual, post, mixes


def test_deepseek_v4s_layers_and_model_are_called_as_the_decoder_calls_them() -> None:
    """vLLM's own classes (importable on CPU, not constructible): the layer's parameters, and the model's loop and
    its final collapse, in both supported releases' forms."""
    from vllm.models.deepseek_v4.nvidia import model as v4

    assert (
        tuple(inspect.signature(v4.DeepseekV4DecoderLayer.forward).parameters)[1:] == DeepseekV4Decoder.layer_parameters
    )
    source = inspect.getsource(v4.DeepseekV4Model.forward)
    assert (
        "hidden_states,\n                positions,\n                input_ids,\n                post_mix,\n                res_mix,\n                residual,"
        in source
    )
    after_loop = source[source.index("for idx, layer in enumerate(") :]
    calls = [
        after_loop.index(call)
        for call in ("mhc_post_tilelang(", "hc_head_fused_kernel_tilelang(", "self.norm(hidden_states)")
    ]
    assert calls == sorted(calls), "the final collapse is mhc_post, then hc_head, then the norm"


def test_deepseek_v4_reflects_x_and_every_residual_stream_and_passes_the_mixes(monkeypatch: pytest.MonkeyPatch) -> None:
    import vllm.model_executor.kernels.mhc.tilelang as tilelang

    finals: list[torch.Tensor] = []

    def mhc_post(
        x: torch.Tensor, residual: torch.Tensor, post_mix: torch.Tensor, res_mix: torch.Tensor
    ) -> torch.Tensor:
        finals.append(x)
        return post_mix.unsqueeze(-1) * x.unsqueeze(-2) + torch.einsum("tij,tjh->tih", res_mix, residual)

    monkeypatch.setattr(tilelang, "mhc_post_tilelang", mhc_post)
    monkeypatch.setattr(tilelang, "hc_head_fused_kernel_tilelang", lambda streams, *weights: streams.sum(dim=1))
    layers = [HyperConnectionLayer(seed) for seed in range(3)]
    decoder = DeepseekV4Decoder(
        SimpleNamespace(
            model=SimpleNamespace(
                layers=layers,
                norm=torch.nn.Identity(),
                hc_mult=STREAMS,
                hc_head_fn=None,
                hc_head_scale=None,
                hc_head_base=None,
                rms_norm_eps=1e-6,
                hc_eps=1e-6,
            )
        )
    )
    assert not decoder.compiles and decoder.needs_input_ids
    generator = torch.Generator().manual_seed(11)
    inputs = torch.randn(TOKENS, HIDDEN, generator=generator)
    input_ids = torch.arange(TOKENS, dtype=torch.int32)
    vectors = torch.nn.functional.normalize(torch.randn(3, HIDDEN, generator=generator), dim=-1)
    rows = torch.tensor([4, 9])
    out = run_stack(decoder, torch.arange(TOKENS), inputs, input_ids, vectors, rows)

    # vLLM 0.25's layers (no hc_attn_fn_broadcast) get the embeddings repeated over the 4 streams.
    assert (
        torch.equal(layers[0].seen[0]["x"], inputs.unsqueeze(1).repeat(1, STREAMS, 1))
        and layers[0].seen[0]["residual"] is None
    )
    for layer in layers:
        assert layer.seen[0]["input_ids"] is input_ids
    # Layer i+1 receives layer i's x and every residual stream reflected by v_i, its mixes unchanged.
    for index in range(2):
        x, residual, post_mix, res_mix = HyperConnectionLayer(index)(*_inputs_of(layers[index]))
        received = layers[index + 1].seen[0]
        assert torch.allclose(received["x"], reflect(x, vectors[index]))
        assert torch.allclose(received["residual"], reflect(residual, vectors[index]))
        assert torch.equal(received["post_mix"], post_mix) and torch.equal(received["res_mix"], res_mix)
    # The last layer's reflection comes before mhc_post, hc_head and the norm.
    last_x, *_ = HyperConnectionLayer(2)(*_inputs_of(layers[2]))
    assert torch.allclose(finals[0], reflect(last_x, vectors[2]))
    assert out.shape == (2, HIDDEN)


def _inputs_of(layer: HyperConnectionLayer) -> tuple[Any, ...]:
    seen = layer.seen[0]
    return seen["x"], torch.arange(TOKENS), seen["input_ids"], seen["post_mix"], seen["res_mix"], seen["residual"]


def test_deepseek_v4_on_vllm_0_28_hands_the_first_layer_the_embeddings() -> None:
    """0.28's first layer broadcasts [T, H] embeddings over the streams itself (hc_attn_fn_broadcast)."""
    layer = HyperConnectionLayer(0)
    layer.hc_attn_fn_broadcast = None
    decoder = DeepseekV4Decoder(
        SimpleNamespace(model=SimpleNamespace(layers=[layer], norm=torch.nn.Identity(), hc_mult=STREAMS))
    )
    inputs = torch.randn(TOKENS, HIDDEN)
    assert decoder.initial_state(inputs)[0] is inputs


def test_a_model_without_a_decoder_is_refused_before_the_engine_starts(tmp_path: Path) -> None:
    """engine_ext.engine_factory reads the architecture vLLM resolves for the model, before any engine process."""
    from vllm.engine.arg_utils import AsyncEngineArgs

    from engine_ext.engine_factory import EngineConfigurationError, require_poc_decoder
    from server.embedded_model import build_embedded_model
    from server.embedded_model.variants import ShapeVariant

    require_poc_decoder(AsyncEngineArgs(model=str(MINIMAX_M2_MODEL_DIR)))
    llama = ShapeVariant("llama", tmp_path, {"architectures": ("LlamaForCausalLM",), "model_type": "llama"})
    with pytest.raises(EngineConfigurationError, match="no decoder for LlamaForCausalLM"):
        require_poc_decoder(AsyncEngineArgs(model=str(build_embedded_model(tmp_path / "llama", llama))))
