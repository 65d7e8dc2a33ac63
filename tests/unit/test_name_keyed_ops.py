"""engine_ext.seams.name_keyed_ops: one compiled graph serves layers whose name-keyed modules differ only by name.

The layers here have vLLM's shape in miniature: a projection, then a module that reads its own `layer_name` string
to pick what it computes (as vLLM's attention and MoE runner pick their KV cache and experts), then more arithmetic.
Compiled as a function of the layer, the trace reads the name and dynamo guards on it: every layer recompiles.
"""

from __future__ import annotations

import pytest
import torch

from engine_ext.poc.compiled_layers import CountingInductor
from engine_ext.seams.name_keyed_ops import NameKeyedModules

LAYERS = 6


class NameKeyed(torch.nn.Module):
    def __init__(self, name: str, scales: dict[str, float]) -> None:
        super().__init__()
        self.layer_name = name
        self.scales = scales

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return hidden * self.scales[self.layer_name]


class Layer(torch.nn.Module):
    def __init__(self, index: int, scales: dict[str, float]) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)
        self.keyed = NameKeyed(f"model.layers.{index}.attn", scales)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.keyed(self.proj(hidden))) + 1


def _layers() -> list[Layer]:
    torch.manual_seed(0)
    scales = {f"model.layers.{i}.attn": float(i + 1) for i in range(LAYERS)}
    return [Layer(i, scales) for i in range(LAYERS)]


def _run(layers: list[Layer], step: object, hidden: torch.Tensor) -> torch.Tensor:
    for layer in layers:
        hidden = step(layer, hidden)  # type: ignore[operator]
    return hidden


def _call(layer: Layer, hidden: torch.Tensor) -> torch.Tensor:
    return layer(hidden)


def test_without_the_seam_each_layer_name_compiles_its_own_graph() -> None:
    torch._dynamo.reset()
    layers, backend = _layers(), CountingInductor()
    step = torch.compile(_call, backend=backend, dynamic=False)
    _run(layers, step, torch.ones(4, 8))
    assert backend.graphs == LAYERS


def test_with_the_seam_one_set_of_graphs_serves_every_layer_with_its_own_name() -> None:
    torch._dynamo.reset()
    layers, backend = _layers(), CountingInductor()
    step = torch.compile(_call, backend=backend, dynamic=False)
    name_keyed = NameKeyedModules(layers)
    hidden = torch.randn(4, 8)
    with torch.no_grad(), name_keyed.run_eagerly():
        compiled = _run(layers, step, hidden)
        graphs_after_one_pass = backend.graphs
        _run(layers, step, hidden)
    # The projection before the break and the arithmetic after it, once for all the layers.
    assert len(name_keyed) == LAYERS and graphs_after_one_pass == 2 and backend.graphs == 2
    with torch.no_grad():
        torch.testing.assert_close(compiled, _run(layers, _call, hidden))


def test_the_class_forward_is_back_after_the_block() -> None:
    layers = _layers()
    name_keyed = NameKeyedModules(layers)
    with pytest.raises(RuntimeError, match="the forward failed"), name_keyed.run_eagerly():
        assert "forward" in vars(layers[0].keyed)
        raise RuntimeError("the forward failed")
    assert all("forward" not in vars(layer.keyed) for layer in layers)
