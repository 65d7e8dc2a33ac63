"""MiniMax-M2's router on vLLM's CPU backend (engine_ext.seams.cpu_router): the routing (sigmoid scores, top-k by score
+ per-expert bias, weights the unbiased scores renormalized), which vLLM's own CPU router refuses (softmax only), and
the float32 router GEMM, whose packed CPU product vLLM feeds bf16 activations."""

from __future__ import annotations

import pytest
import torch
from transformers import MiniMaxM2Config
from transformers.models.minimax_m2.modeling_minimax_m2 import MiniMaxM2TopKRouter

from engine_ext.seams import install_seams, seams_for_installed_vllm
from engine_ext.seams.common import SEAM_MARK
from engine_ext.seams.cpu_router import CPU_FLOAT32_GEMM_INPUT, CPU_SIGMOID_ROUTING

TOKENS, HIDDEN, EXPERTS, TOP_K = 64, 32, 16, 4


@pytest.fixture(scope="module")
def router_module():
    install_seams(is_cpu_platform=True)
    module = seams_for_installed_vllm().cpu_expert_router()
    assert getattr(module.select_experts, SEAM_MARK, None) == CPU_SIGMOID_ROUTING
    return module


def minimax_router() -> tuple[MiniMaxM2TopKRouter, torch.Tensor, torch.Tensor]:
    """transformers' MiniMax-M2 router with random weights, a bias as large as the scores' spread, and hidden states."""
    generator = torch.Generator().manual_seed(3)
    config = MiniMaxM2Config(hidden_size=HIDDEN, num_local_experts=EXPERTS, num_experts_per_tok=TOP_K)
    router = MiniMaxM2TopKRouter(config)
    with torch.no_grad():
        router.weight.copy_(torch.randn(EXPERTS, HIDDEN, generator=generator) * 0.05)
    bias = torch.randn(EXPERTS, generator=generator) * 0.05
    return router, bias, torch.randn(TOKENS, HIDDEN, generator=generator)


def vllm_call(select_experts, logits: torch.Tensor, bias: torch.Tensor | None, hidden: torch.Tensor):
    """As vLLM's CPU experts call it for MiniMax-M2's FusedMoE (scoring_func sigmoid, renormalize, no groups)."""
    return select_experts(
        hidden_states=hidden,
        router_logits=logits,
        top_k=TOP_K,
        use_grouped_topk=False,
        renormalize=True,
        topk_group=None,
        num_expert_group=None,
        custom_routing_function=None,
        scoring_func="sigmoid",
        routed_scaling_factor=1.0,
        e_score_correction_bias=bias,
    )


def by_expert(weights: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """[T, E] dense weights: the order of a token's k experts is free."""
    dense = torch.zeros(weights.shape[0], EXPERTS, dtype=torch.float32)
    return dense.scatter_(1, ids.long(), weights.float())


def test_vllms_cpu_router_refuses_sigmoid_routing_without_the_seam(router_module) -> None:
    router, bias, hidden = minimax_router()
    logits = torch.nn.functional.linear(hidden, router.weight)
    with pytest.raises(AssertionError):
        vllm_call(router_module.select_experts.__wrapped__, logits, bias, hidden)


def test_the_seam_routes_as_transformers_minimax_m2_router(router_module) -> None:
    router, bias, hidden = minimax_router()
    with torch.no_grad():
        logits, reference_weights, reference_ids = router(hidden, bias)
    weights, ids = vllm_call(router_module.select_experts, logits, bias, hidden)
    assert (
        weights.dtype == torch.float32 and ids.dtype == torch.int32 and weights.is_contiguous() and ids.is_contiguous()
    )
    assert torch.equal(by_expert(weights, ids) != 0, by_expert(reference_weights, reference_ids) != 0)
    assert torch.allclose(by_expert(weights, ids), by_expert(reference_weights, reference_ids), atol=1e-6)
    # The bias decides: without it (a router that ignored it), other experts would be chosen for most tokens.
    _, unbiased_ids = vllm_call(router_module.select_experts, logits, None, hidden)
    changed = (by_expert(torch.ones_like(weights), ids) != by_expert(torch.ones_like(weights), unbiased_ids)).any(1)
    assert changed.float().mean() > 0.5


def test_softmax_routing_is_vllms_own(router_module) -> None:
    router, _, hidden = minimax_router()
    logits = torch.nn.functional.linear(hidden, router.weight)
    options = dict(hidden_states=hidden, router_logits=logits, top_k=TOP_K, use_grouped_topk=False, renormalize=True)
    seamed = router_module.select_experts(**options)
    own = router_module.select_experts.__wrapped__(**options)
    assert all(torch.equal(a, b) for a, b in zip(seamed, own))


@pytest.fixture(scope="module")
def one_rank():
    """vLLM's linear layers read the tensor-parallel group: one rank, gloo, as a CPU engine has."""
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.distributed import cleanup_dist_env_and_memory, init_distributed_environment, initialize_model_parallel

    from tests.support.server_process import free_port

    with set_current_vllm_config(VllmConfig()):
        init_distributed_environment(1, 0, f"tcp://127.0.0.1:{free_port()}", 0, "gloo")
        initialize_model_parallel(1, 1)
        yield
        cleanup_dist_env_and_memory()


def packed_gate(dispatch, monkeypatch: pytest.MonkeyPatch) -> tuple[object, torch.Tensor, list[torch.dtype]]:
    """MiniMax-M2's router GEMM (float32 weights, float32 logits) after vLLM's CPU weight packing by `dispatch`, its
    float32 weights, and the dtypes of the activations its oneDNN product is handed (recorded; a bf16 one is not run:
    the product built for float32 would read past it)."""
    import vllm._custom_ops as ops
    from vllm.model_executor.layers.fused_moe.router.gate_linear import GateLinear

    torch.set_default_dtype(torch.bfloat16)  # as vLLM loads a bf16 model
    try:
        gate = GateLinear(HIDDEN, EXPERTS, bias=False, params_dtype=torch.float32, out_dtype=torch.float32)
        gate.weight.data.copy_(torch.randn(EXPERTS, HIDDEN, generator=torch.Generator().manual_seed(5)))
        weights = gate.weight.detach().clone()
        dispatch(gate, remove_weight=True)
    finally:
        torch.set_default_dtype(torch.float32)
    received: list[torch.dtype] = []
    onednn_mm = ops.onednn_mm

    def recording(handler: object, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        received.append(x.dtype)
        return onednn_mm(handler, x, bias) if x.dtype == torch.float32 else torch.zeros(x.shape[0], EXPERTS)

    monkeypatch.setattr(ops, "onednn_mm", recording)
    return gate, weights, received


def test_vllms_cpu_packing_hands_bf16_activations_to_a_float32_gemm_without_the_seam(
    router_module, one_rank, monkeypatch
) -> None:
    from vllm.model_executor.layers import utils

    assert getattr(utils.dispatch_cpu_unquantized_gemm, SEAM_MARK, None) == CPU_FLOAT32_GEMM_INPUT
    gate, _, received = packed_gate(utils.dispatch_cpu_unquantized_gemm.__wrapped__, monkeypatch)
    gate(torch.randn(TOKENS, HIDDEN, dtype=torch.bfloat16))
    assert received == [torch.bfloat16]


def test_the_seam_hands_the_float32_gemm_float32_activations(router_module, one_rank, monkeypatch) -> None:
    from vllm.model_executor.layers import utils

    gate, weights, received = packed_gate(utils.dispatch_cpu_unquantized_gemm, monkeypatch)
    hidden = torch.randn(TOKENS, HIDDEN, generator=torch.Generator().manual_seed(6)).to(torch.bfloat16)
    logits, _ = gate(hidden)
    assert received == [torch.float32] and logits.dtype == torch.float32
    assert torch.allclose(logits, hidden.float() @ weights.t(), atol=1e-4)
