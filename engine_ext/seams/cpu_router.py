"""MiniMax-M2's router on vLLM's CPU backend: two seams, without which a MiniMax-M2 engine dies in its first forward
on a CPU host (vLLM ships no CPU test of the model).

- cpu_sigmoid_bias_routing: vLLM's CPU mixture-of-experts layers pick each token's experts in a module-level
  `select_experts` (0.25.1: `fused_moe/cpu_fused_moe.py`, 0.28.0: `fused_moe/experts/cpu_moe.py`) that, for routing
  without expert groups and without a custom routing function, asserts `scoring_func == "softmax"`. The GPU path
  (`fused_topk_bias`) and transformers' MiniMax-M2 router compute: scores = sigmoid(logits) in float32, the top-k
  experts by score + bias, their weights the unbiased scores renormalized to sum 1, times the routed scaling factor.
  The seam adds that case to the CPU function and passes every other call through; no public hook chooses a CPU
  router.
- cpu_float32_gemm_input: MiniMax-M2's router GEMM (`GateLinear`) keeps float32 weights and casts its bf16 input to
  its weight's dtype. On a CPU host vLLM packs every unquantized linear layer's weights for oneDNN and replaces the
  weight by an empty tensor of the default dtype (bf16) (`dispatch_cpu_unquantized_gemm`), so the cast no longer
  happens and bf16 activations reach a oneDNN product built for float32: it reads past them and corrupts the heap
  (a segmentation fault or `free(): invalid next size` in the profile run). The seam makes the packed product of a
  float32 layer take its input as float32, which is what the layer's own cast would have done.
"""

from __future__ import annotations

import importlib
import inspect
from types import ModuleType
from typing import Any

import torch

from engine_ext.seams.common import SEAM_MARK, mark, marks_on

CPU_SIGMOID_ROUTING = "cpu_sigmoid_bias_routing"
CPU_FLOAT32_GEMM_INPUT = "cpu_float32_gemm_input"


def sigmoid_bias_routing(
    router_logits: torch.Tensor,
    top_k: int,
    renormalize: bool,
    e_score_correction_bias: torch.Tensor | None,
    routed_scaling_factor: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(weights float32 [T, k], expert ids int32 [T, k]), contiguous, as vLLM's CPU experts read them."""
    scores = router_logits.float().sigmoid()
    chosen_by = scores if e_score_correction_bias is None else scores + e_score_correction_bias.float().unsqueeze(0)
    ids = torch.topk(chosen_by, k=top_k, dim=-1, sorted=False).indices
    weights = scores.gather(1, ids)
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    if routed_scaling_factor != 1.0:
        weights = weights * routed_scaling_factor
    return weights.contiguous(), ids.to(torch.int32).contiguous()


def install_cpu_sigmoid_routing(module: ModuleType) -> None:
    """Wraps `module.select_experts` (vLLM's CPU router of this release), idempotently."""
    original = module.select_experts
    if getattr(original, SEAM_MARK, None) == CPU_SIGMOID_ROUTING:
        return
    signature = inspect.signature(original)

    def select_experts(*args: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        call = signature.bind(*args, **kwargs)
        call.apply_defaults()
        options = call.arguments
        if (
            not options["use_grouped_topk"]
            and options["custom_routing_function"] is None
            and options["scoring_func"] == "sigmoid"
        ):
            return sigmoid_bias_routing(
                options["router_logits"],
                options["top_k"],
                options["renormalize"],
                options["e_score_correction_bias"],
                options["routed_scaling_factor"],
            )
        return original(*args, **kwargs)

    # vLLM's module, whose attributes mypy reads off the release's own sources.
    module.select_experts = mark(select_experts, CPU_SIGMOID_ROUTING, original)  # type: ignore[attr-defined]


def install_cpu_float32_gemm_input(layer_utils: ModuleType) -> None:
    """Wraps `layer_utils.dispatch_cpu_unquantized_gemm` (vllm.model_executor.layers.utils), idempotently."""
    original = layer_utils.dispatch_cpu_unquantized_gemm
    if getattr(original, SEAM_MARK, None) == CPU_FLOAT32_GEMM_INPUT:
        return

    def dispatch_cpu_unquantized_gemm(layer: Any, remove_weight: bool, *args: Any, **kwargs: Any) -> None:
        weight = getattr(layer, "weight", None)
        float32_layer = (
            isinstance(weight, torch.Tensor)
            and weight.dtype == torch.float32
            and weight.ndim == 2
            and not weight.is_meta
        )
        original(layer, remove_weight, *args, **kwargs)
        if float32_layer:
            layer.cpu_linear = _float32_input(layer.cpu_linear)

    wrapper = mark(dispatch_cpu_unquantized_gemm, CPU_FLOAT32_GEMM_INPUT, original)
    layer_utils.dispatch_cpu_unquantized_gemm = wrapper  # type: ignore[attr-defined]


def _float32_input(linear: Any) -> Any:
    def cpu_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        return linear(x.to(torch.float32), weight, bias)

    return cpu_linear


# Where vLLM's CPU linear layers choose their GEMM (seam cpu_float32_gemm_input), the same on every supported release.
LAYER_UTILS = "vllm.model_executor.layers.utils"


def install_cpu_router_seams(router_module: str) -> None:
    """Both seams; `router_module` is the release's module whose `select_experts` routes vLLM's CPU experts."""
    install_cpu_sigmoid_routing(importlib.import_module(router_module))
    install_cpu_float32_gemm_input(importlib.import_module(LAYER_UTILS))


def cpu_router_seams() -> set[str]:
    return {CPU_SIGMOID_ROUTING, CPU_FLOAT32_GEMM_INPUT}


def installed_cpu_router_seams(router_module: str) -> list[str]:
    """Names of the two seams in place in this process, read off the patched functions."""
    router, layer_utils = importlib.import_module(router_module), importlib.import_module(LAYER_UTILS)
    return marks_on([router.select_experts, layer_utils.dispatch_cpu_unquantized_gemm])
