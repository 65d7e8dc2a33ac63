"""The routed experts of each MoE layer with their activation fused into the gate/up projection, for the compiled
PoC forward (the layout of vLLM 0.20.1 to 0.28.0: the experts a layer's RoutedExperts holds since 0.25).

On an H200 (Qwen3-30B-A3B shape, 1024 x 32) the experts of a PoC batch spent 222 ms in vLLM's Triton GEMMs, 13 ms
in the activation kernel between them and 20 ms in the top-k sum. vLLM's Triton experts (`TritonExperts.apply`)
write the gate and up projections, read them back for silu(gate) * up, then run the down projection and the sum.
For the duration of one forward, each qualifying layer's experts object gets an `apply` that runs the same steps
with the first two merged into one kernel, and the sum as a Triton kernel that accumulates in fp32
(engine_ext.seams.expert_kernels); vLLM's own expert alignment and its down projection kernel with its tuned config
stay. Measured there: one experts call 5.05 ms against vLLM's 5.21 (the sum 0.28 ms against 0.40), output within
relative L2 0.005 of vLLM's; the PoC artifacts at the same largest L2 from the eager forward's (0.0194). The MoE
layers run as vLLM's opaque custom op, so the swap takes effect at run time, without a recompile; outside the
block the experts are vLLM's again.

Only the form the fused kernel implements is stood in for: vLLM's Triton experts (not a subclass), unquantized,
without biases or LoRA, and per call a SiLU-gated layer in bf16 or fp16 without an expert map or router weights on
the input. Anything else calls vLLM's own apply.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from engine_ext.seams.expert_kernels import GateUpTile, gate_up_swiglu, topk_sum
from engine_ext.seams.shadowing import shadowed_method

KERNEL_DTYPES = (torch.bfloat16, torch.float16)
# Chosen on the H200 at the PoC's 32,768 tokens (benchmarks/studies/moe_config_search.py --fused-swiglu): within 0.5 % of
# the fastest of 144 tiles. The down projection keeps vLLM's config, which was within 0.3 % of the fastest of 69
# tiles for it alone (--down-projection).
DEFAULT_TILE = GateUpTile()


def routed_experts_swiglu(
    output: torch.Tensor,
    hidden_states: torch.Tensor,
    w1: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    global_num_experts: int,
    config_dtype: str | None,
    tile: GateUpTile,
    workspace13: torch.Tensor | None = None,
    workspace2: torch.Tensor | None = None,
    down_tile: dict[str, int] | None = None,
) -> None:
    """output[t] = sum_j topk_weights[t, j] * down_e(silu(gate_e(x_t)) * up_e(x_t)), e = topk_ids[t, j]: what
    vLLM's Triton experts compute for an unquantized SiLU-gated layer. The workspaces are vLLM's (the activated
    projections go in workspace13, the down projections in workspace2), or fresh ones when None. down_tile
    overrides vLLM's config for the down projection, all but its block height (which aligns the routed slots for
    both kernels)."""
    from vllm.model_executor.layers.fused_moe.fused_moe import (
        invoke_fused_moe_triton_kernel,
        try_get_optimal_moe_config,
    )
    from vllm.model_executor.layers.fused_moe.moe_align_block_size import moe_align_block_size
    from vllm.triton_utils import tl

    tokens, top_k = topk_ids.shape
    width, hidden = w1.shape[1] // 2, w2.shape[1]
    slots = tokens * top_k
    # The config vLLM's own experts would run with: its block height aligns the routed slots for both kernels.
    config = try_get_optimal_moe_config(tuple(w1.shape), tuple(w2.shape), top_k, config_dtype, tokens)
    block_m = config["BLOCK_SIZE_M"]
    sorted_slot_ids, expert_ids, padded_slots = moe_align_block_size(topk_ids, block_m, global_num_experts)
    activated = _workspace(workspace13, (slots, width), hidden_states)
    gate_up_swiglu(hidden_states, w1, activated, sorted_slot_ids, expert_ids, padded_slots, top_k, block_m, tile)
    down = _workspace(workspace2, (tokens, top_k, hidden), hidden_states)
    invoke_fused_moe_triton_kernel(
        activated,
        w2,
        down,
        None,
        None,
        topk_weights,
        sorted_slot_ids,
        expert_ids,
        padded_slots,
        True,  # the router weights multiply the down projections, as in vLLM's own path
        1,
        {**config, **(down_tile or {}), "BLOCK_SIZE_M": block_m},
        compute_type=tl.bfloat16 if hidden_states.dtype == torch.bfloat16 else tl.float16,
        use_fp8_w8a8=False,
        use_int8_w8a8=False,
        use_int8_w8a16=False,
        use_int4_w4a16=False,
        per_channel_quant=False,
    )
    topk_sum(down, output)


def _workspace(buffer: torch.Tensor | None, shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
    if buffer is None:
        return torch.empty(shape, dtype=like.dtype, device=like.device)
    return buffer.flatten()[: math.prod(shape)].view(shape)


class SwigluTritonExperts:
    """Stands in for one layer's `TritonExperts.apply`: routed_experts_swiglu for the calls it qualifies for,
    vLLM's own apply for the rest."""

    def __init__(self, experts: Any, tile: GateUpTile) -> None:
        self.experts = experts
        self.tile = tile
        self.vllm_apply: Callable[..., None] = type(experts).apply.__get__(experts)
        # Bound once: every call of the forward sees the same callable.
        self.apply = self._apply

    def _apply(
        self,
        output: torch.Tensor,
        hidden_states: torch.Tensor,
        w1: torch.Tensor,
        w2: torch.Tensor,
        topk_weights: torch.Tensor,
        topk_ids: torch.Tensor,
        activation: Any,
        global_num_experts: int,
        expert_map: torch.Tensor | None,
        a1q_scale: torch.Tensor | None,
        a2_scale: torch.Tensor | None,
        workspace13: torch.Tensor,
        workspace2: torch.Tensor,
        expert_tokens_meta: Any,
        apply_router_weight_on_input: bool,
    ) -> None:
        if (
            # vLLM passes a MoEActivation, whose value is the name
            getattr(activation, "value", activation) != "silu"
            or expert_map is not None
            or a1q_scale is not None
            or apply_router_weight_on_input
            or hidden_states.dtype not in KERNEL_DTYPES
            # weights in the activations' dtype: no weight-only quantization
            or w1.dtype != hidden_states.dtype
            or w2.dtype != hidden_states.dtype
            or not hidden_states.is_contiguous()
            or getattr(self.experts, "_lora_context", None) is not None
        ):
            self.vllm_apply(
                output,
                hidden_states,
                w1,
                w2,
                topk_weights,
                topk_ids,
                activation,
                global_num_experts,
                expert_map,
                a1q_scale,
                a2_scale,
                workspace13,
                workspace2,
                expert_tokens_meta,
                apply_router_weight_on_input,
            )
            return
        if global_num_experts == -1:
            global_num_experts = w1.shape[0]
        routed_experts_swiglu(
            output,
            hidden_states,
            w1,
            w2,
            topk_weights,
            topk_ids,
            global_num_experts,
            self.experts.quant_config.config_name(hidden_states.dtype),
            self.tile,
            workspace13,
            workspace2,
        )


def swiglu_expert_stand_ins(model: Any, tile: GateUpTile = DEFAULT_TILE) -> list[tuple[Any, SwigluTritonExperts]]:
    """(experts object, stand-in) for every MoE layer of the model whose experts are vLLM's unquantized Triton
    experts without biases, on a CUDA build; [] when there are none or any MoE layer has other experts."""
    if not torch.cuda.is_available():
        return []
    # vLLM 0.25 and 0.28 keep an MoE layer's weights and quant method in a RoutedExperts module (FusedMoE became a
    # factory of the layer's runner) and the Triton experts in a module of their own.
    from vllm.model_executor.layers.fused_moe.experts.triton_moe import TritonExperts
    from vllm.model_executor.layers.fused_moe.routed_experts import RoutedExperts

    experts_of_layers = [_experts_of(module) for module in model.modules() if isinstance(module, RoutedExperts)]
    if not experts_of_layers or not all(
        type(experts) is TritonExperts and _unquantized(experts) for experts in experts_of_layers
    ):
        return []
    return [(experts, SwigluTritonExperts(experts, tile)) for experts in experts_of_layers]


def _experts_of(layer: Any) -> Any:
    # The modular kernel sits on the quant method as `moe_kernel` (0.20.1 to 0.28.0).
    kernel = getattr(layer.quant_method, "moe_kernel", None)
    return getattr(kernel, "fused_experts", None)


def _unquantized(experts: Any) -> bool:
    quant = experts.quant_config
    return quant.quant_dtype is None and quant.w1_bias is None and quant.w2_bias is None


def fused_moe_swiglu(stand_ins: Sequence[tuple[Any, SwigluTritonExperts]]) -> contextlib.AbstractContextManager[None]:
    """(experts, stand-in) pairs, made once by the caller: each one runs its stand-in's apply until the block ends."""
    return shadowed_method("apply", stand_ins)
