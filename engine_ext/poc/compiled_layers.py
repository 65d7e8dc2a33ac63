"""The compiled PoC forward: each step of the layer stack (engine_ext.poc.layer_stack) compiled by torch.compile
(inductor) once per layer kind and reused across the layers, rather than the whole stack unrolled into one graph.

One graph of a 36-layer stack took about 100 s to compile on a fresh H200 (dynamo traces every layer, inductor
generates and tunes kernels for all of them); the layers of a kind are the same code on weights of the same shapes,
so their graph is the same. The step is compiled with the layer module as an argument: dynamo lifts its parameters
and buffers as graph inputs, so no weight is baked into a graph. vLLM's attention and MoE modules reach their
custom op by their layer's name, which a trace would bake in: they run outside the graphs, reading their own name
(engine_ext.seams.name_keyed_ops), so layer i+1 runs layer i's graphs on its own weights, KV cache and experts.
Dynamo's own guards decide what "a kind" is: they check each module's type and every Python value the trace read
from it (epsilons, head counts, a sliding window...), so a layer that differs in any of them gets graphs of its own
rather than wrong ones; the first layer (no residual yet) and the last (the rows the head reads, the final norm)
have theirs. The graphs of a kind are its pieces between the name-keyed modules (before the attention, between it
and the experts, after them): a dense or MoE stack of any depth compiles the same few.

The token count is dynamic, so one set of graphs serves every batch shape; everything else (hidden size, heads,
experts) is a constant the kernels are specialized for. Each step's token-major inputs are marked dynamic at every
call; the pieces after a graph break start from tensors nobody marks, so they compile for one token count first and
dynamo's automatic dynamic shapes (hence `dynamic=None`, not False, which would recompile them for every batch size
until the recompile limit sent them to eager) make it dynamic at the first other count: the server runs its second
start-up batch at another size for that (MlnodeEngine.prepare_poc_forward). The graphs are counted and their compile
time summed, for the start-up log and the benchmarks.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from engine_ext.poc.decoders import PocDecoder, StreamState
from engine_ext.poc.layer_stack import reflected_last_layer, reflected_layer, run_stack
from engine_ext.seams.name_keyed_ops import NameKeyedModules


class CountingInductor:
    """torch.compile's default backend (inductor), counting the graphs it compiles and the seconds that took."""

    def __init__(self) -> None:
        self.graphs = 0
        self.seconds = 0.0

    def __call__(self, graph: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        from torch._inductor.compile_fx import compile_fx

        started = time.perf_counter()
        compiled = compile_fx(graph, example_inputs)
        self.graphs += 1
        self.seconds += time.perf_counter() - started
        return compiled


class CompiledLayers:
    """The layer stack with its two steps compiled (one graph per layer kind), for one model in one process."""

    def __init__(self) -> None:
        self.backend = CountingInductor()
        self._step = torch.compile(reflected_layer, backend=self.backend, dynamic=None)
        self._last_step = torch.compile(reflected_last_layer, backend=self.backend, dynamic=None)
        self._name_keyed: NameKeyedModules | None = None

    def __call__(
        self,
        decoder: PocDecoder,
        positions: torch.Tensor,
        inputs_embeds: torch.Tensor,
        input_ids: torch.Tensor | None,
        vectors: torch.Tensor,
        rows: torch.Tensor,
    ) -> torch.Tensor:
        """[len(rows), H], as layer_stack.run_stack."""
        if self._name_keyed is None:
            self._name_keyed = NameKeyedModules(decoder.layers)
        with self._name_keyed.run_eagerly():
            return run_stack(decoder, positions, inputs_embeds, input_ids, vectors, rows, self.step, self.last_step)

    def step(
        self,
        decoder: PocDecoder,
        layer: Any,
        positions: torch.Tensor,
        input_ids: torch.Tensor | None,
        state: StreamState,
        vector: torch.Tensor,
    ) -> StreamState:
        mark_token_dimension(positions, input_ids, *state)
        return self._step(decoder, layer, positions, input_ids, state, vector)

    def last_step(
        self,
        decoder: PocDecoder,
        layer: Any,
        positions: torch.Tensor,
        input_ids: torch.Tensor | None,
        state: StreamState,
        vector: torch.Tensor,
        rows: torch.Tensor,
    ) -> torch.Tensor:
        mark_token_dimension(positions, input_ids, rows, *state)
        return self._last_step(decoder, layer, positions, input_ids, state, vector, rows)

    @property
    def graphs(self) -> int:
        return self.backend.graphs

    @property
    def compile_seconds(self) -> float:
        return self.backend.seconds


def mark_token_dimension(*tensors: torch.Tensor | None) -> None:
    """Dimension 0 (tokens, or the kept rows) of each tensor is dynamic for dynamo: one graph for every batch shape
    (a size of 1, which dynamo specializes, gets a graph of its own). Each step's inputs are the previous step's
    outputs, new tensors every call, so they are marked at every call."""
    for tensor in tensors:
        if tensor is not None:
            torch._dynamo.maybe_mark_dynamic(tensor, 0)
