"""engine_ext.poc.compiled_layers on a miniature model with vLLM's layer shape: each layer's attention stand-in reads
its own `layer_name` (as vLLM's attention and MoE runner do), so the graphs are pieces between graph breaks.

What must hold on any depth and any sequence of batch sizes: the compiled stack computes what the eager one does;
the graph count stops growing once two sizes have run (the pieces after a break become dynamic in the token count)
and does not grow with the depth; dynamo never reaches its recompile limit, past which it would run layers eagerly
without an error.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from engine_ext.poc.compiled_layers import CompiledLayers
from engine_ext.poc.decoders.residual_pair import ResidualPairDecoder
from engine_ext.poc.layer_stack import run_stack

HIDDEN = 16


class NameKeyedMixer(torch.nn.Module):
    """Mixes the tokens of each sequence as attention does; which scale it uses is found by its layer's name."""

    def __init__(self, name: str, scales: dict[str, float]) -> None:
        super().__init__()
        self.layer_name = name
        self.scales = scales

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(hidden, dim=0) * self.scales[self.layer_name]


class Norm(torch.nn.Module):
    def forward(self, hidden: torch.Tensor, residual: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        stream = hidden if residual is None else hidden + residual
        return stream / (stream.norm(dim=-1, keepdim=True) + 1), stream


class Layer(torch.nn.Module):
    def __init__(self, index: int, scales: dict[str, float]) -> None:
        super().__init__()
        self.input_layernorm = Norm()
        self.proj = torch.nn.Linear(HIDDEN, HIDDEN)
        self.mixer = NameKeyedMixer(f"model.layers.{index}.self_attn.attn", scales)
        self.out = torch.nn.Linear(HIDDEN, HIDDEN)

    def forward(
        self, positions: torch.Tensor, hidden_states: torch.Tensor, residual: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        normed, residual = self.input_layernorm(hidden_states, residual)
        return torch.tanh(self.out(self.mixer(self.proj(normed)))), residual


def _decoder(depth: int) -> ResidualPairDecoder:
    torch.manual_seed(depth)
    scales = {f"model.layers.{i}.self_attn.attn": 1.0 / (i + 1) for i in range(depth)}
    model = SimpleNamespace(
        model=SimpleNamespace(layers=torch.nn.ModuleList(Layer(i, scales) for i in range(depth)), norm=Norm())
    )
    return ResidualPairDecoder(model)


def _inputs(depth: int, nonces: int, seq_len: int = 4) -> tuple[torch.Tensor, ...]:
    tokens = nonces * seq_len
    generator = torch.Generator().manual_seed(nonces)
    positions = torch.arange(seq_len).repeat(nonces)
    embeds = torch.randn(tokens, HIDDEN, generator=generator)
    vectors = torch.nn.functional.normalize(torch.randn(depth, HIDDEN, generator=generator), dim=-1)
    rows = torch.arange(seq_len - 1, tokens, seq_len)
    return positions, embeds, vectors, rows


@pytest.mark.parametrize("depth", [3, 12])
def test_every_batch_size_runs_on_the_same_graphs_at_any_depth(depth: int, caplog: pytest.LogCaptureFixture) -> None:
    torch._dynamo.reset()
    decoder, compiled = _decoder(depth), CompiledLayers()
    graphs_after: list[int] = []
    with torch.no_grad():
        for nonces in (3, 2, 5, 7, 4, 9, 6, 8, 10, 11):
            positions, embeds, vectors, rows = _inputs(depth, nonces)
            result = compiled(decoder, positions, embeds, None, vectors, rows)
            torch.testing.assert_close(result, run_stack(decoder, positions, embeds, None, vectors, rows))
            graphs_after.append(compiled.graphs)
    # The first size compiles the pieces of the first, a middle and the last layer; the second makes the pieces
    # after a break dynamic; no later size and no further layer compiles anything.
    assert graphs_after[1:] == [graphs_after[1]] * (len(graphs_after) - 1), graphs_after
    assert "recompile_limit" not in caplog.text


def test_the_graph_count_does_not_grow_with_the_depth() -> None:
    counts = []
    for depth in (3, 12):
        torch._dynamo.reset()
        decoder, compiled = _decoder(depth), CompiledLayers()
        with torch.no_grad():
            for nonces in (3, 2):
                positions, embeds, vectors, rows = _inputs(depth, nonces)
                compiled(decoder, positions, embeds, None, vectors, rows)
        counts.append(compiled.graphs)
    assert counts[0] == counts[1], counts
