"""vLLM's modules that reach their custom op by their own layer's name, run outside the compiled PoC forward's graphs.

Attention and the MoE runner call an opaque custom op with their layer's name (`layer_name`), which the op uses to
find the layer's KV cache, metadata or experts in the forward context. vLLM 0.25+ on torch 2.11+ hoists the name into
the graph as an opaque input (`vllm.utils.torch_utils.LayerName`), but the trace still reads the module's
`layer_name` string to build it, so dynamo guards on the string's value: a graph compiled on layer 0 fails its guards
on layer 1 and recompiles for every layer, until dynamo's recompile limit (8) sends the rest of the stack to eager
with no more than a warning (seen on vLLM 0.25.1: `torch._dynamo hit config.recompile_limit (8)`).

For the duration of a block, each such module's `forward` is its class's forward behind `torch._dynamo.disable`:
dynamo breaks the graph there and the module runs as Python, reading its own name, so no graph reads a layer's name
and one set of graphs (the pieces between the name-keyed modules) serves every layer of a kind. Inductor treats the
custom ops as opaque anyway, so no fusion is lost across the breaks. The stand-ins are made once (one disabled
function per class, shared by its modules) and shadow the class's forward only inside the block
(engine_ext.seams.shadowing): vLLM's own forward of the model never sees them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from types import SimpleNamespace
from typing import Any

import torch

from engine_ext.seams.shadowing import shadowed_method

# Where vLLM's name-keyed modules keep their layer's name (Attention, MLAAttention, MoERunner, ...).
NAME_ATTRIBUTE = "layer_name"


def is_name_keyed(module: torch.nn.Module) -> bool:
    return isinstance(getattr(module, NAME_ATTRIBUTE, None), str)


class NameKeyedModules:
    """The name-keyed modules among some layers' submodules, each with its eager stand-in, made once."""

    def __init__(self, layers: Sequence[torch.nn.Module]) -> None:
        disabled: dict[type, Callable[..., Any]] = {}
        self._stand_ins: list[tuple[torch.nn.Module, SimpleNamespace]] = []
        for layer in layers:
            for module in layer.modules():
                if is_name_keyed(module):
                    cls = type(module)
                    forward = disabled.setdefault(cls, torch._dynamo.disable(cls.forward))
                    self._stand_ins.append((module, SimpleNamespace(forward=forward.__get__(module, cls))))

    def __len__(self) -> int:
        return len(self._stand_ins)

    @contextlib.contextmanager
    def run_eagerly(self) -> Iterator[None]:
        """Every name-keyed module runs outside dynamo until the block ends (also when it raises)."""
        with shadowed_method("forward", self._stand_ins):
            yield
