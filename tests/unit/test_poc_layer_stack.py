"""The PoC layer stack's last layer past its attention (engine_ext.poc.layer_stack.layer_on_rows), and the compiled
forward's inputs for it: the rows it keeps and the guards dynamo keeps.

A PoC artifact reads each sequence's last token only, so the compiled forward's last layer runs its MLP (a MoE
layer's routed experts) on those rows alone. That is exact only for a layer whose body is row-wise after its
attention: the layers listed are checked here against the forward vLLM ships, and the split is run through
vLLM's own forward code on stand-in submodules whose attention mixes rows.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import textwrap
from types import SimpleNamespace

import pytest
import torch

from engine_ext.poc.layer_stack import ROW_WISE_AFTER_ATTENTION, layer_on_rows
from engine_ext.poc.worker_forward import last_token_rows, symbolic_shape_guards

# The body every listed layer's forward must have (the form layer_on_rows writes out).
EXPECTED_BODY = """
if residual is None:
    residual = hidden_states
    hidden_states = self.input_layernorm(hidden_states)
else:
    hidden_states, residual = self.input_layernorm(hidden_states, residual)
hidden_states = self.self_attn(positions=positions, hidden_states=hidden_states)
hidden_states, residual = self.post_attention_layernorm(hidden_states, residual)
hidden_states = self.mlp(hidden_states)
return hidden_states, residual
"""


def layer_class(name: str) -> type:
    module, _, qualname = name.rpartition(".")
    return getattr(importlib.import_module(module), qualname)


def body_dump(source: str) -> list[str]:
    return [ast.dump(statement) for statement in ast.parse(textwrap.dedent(source)).body]


@pytest.mark.parametrize("name", sorted(ROW_WISE_AFTER_ATTENTION))
def test_each_listed_layer_has_the_body_written_out(name: str) -> None:
    (forward,) = ast.parse(textwrap.dedent(inspect.getsource(layer_class(name).forward))).body
    assert isinstance(forward, ast.FunctionDef)
    body = [
        statement
        for statement in forward.body
        if not (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant))
    ]
    assert [ast.dump(statement) for statement in body] == body_dump(EXPECTED_BODY)


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
    layer.mlp = torch.nn.Tanh()
    return layer


@pytest.mark.parametrize("name", sorted(ROW_WISE_AFTER_ATTENTION))
@pytest.mark.parametrize("first_layer", [True, False], ids=["first", "later"])
def test_the_split_equals_the_layers_own_forward_at_the_kept_rows(name: str, first_layer: bool) -> None:
    layer = stand_in_layer(name)
    generator = torch.Generator().manual_seed(7)
    hidden = torch.randn(12, 5, generator=generator)
    residual = None if first_layer else torch.randn(12, 5, generator=generator)
    positions = torch.arange(12) % 4
    rows = last_token_rows(3, 4, torch.device("cpu"))
    whole_hidden, whole_residual = layer(positions, hidden, residual)
    kept_hidden, kept_residual = layer_on_rows(layer, positions, hidden, residual, rows)
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

    hidden = torch.arange(8.0).view(4, 2)
    rows = torch.tensor([1, 3])
    kept_hidden, kept_residual = layer_on_rows(OtherLayer(), torch.arange(4), hidden, None, rows)
    assert calls == [4]
    assert torch.equal(kept_hidden, torch.cumsum(hidden, dim=0)[rows])
    assert torch.equal(kept_residual, hidden[rows])


def test_last_token_rows() -> None:
    cpu = torch.device("cpu")
    assert last_token_rows(3, 4, cpu).tolist() == [3, 7, 11]
    # A lone sequence's row goes twice: the compiled stack is dynamic in the row count from 2 on.
    assert last_token_rows(1, 5, cpu).tolist() == [4, 4]


def test_only_the_symbolic_shape_guards_are_kept() -> None:
    guards = [
        SimpleNamespace(guard_type=kind)
        for kind in ("SHAPE_ENV", "TENSOR_MATCH", "ID_MATCH", "SHAPE_ENV", "TYPE_MATCH")
    ]
    assert symbolic_shape_guards(guards) == [True, False, False, True, False]
