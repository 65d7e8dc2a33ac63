"""The batched PoC forward, in each worker (poc-v2.md sections 3-6; ../shared/vllm-seams.md 5.2-5.4).

One forward per batch of nonces on the loaded model: inputs written by the consensus core into their
own tensor (never KV-cache storage), positions 0..S-1 per nonce, attention metadata built for this
call, the decoder layers with the reflections between them (engine_ext.poc.layer_stack: code only
a PoC forward runs, so the inference path never sees a reflection). The model's own compiled graph
is never used (`skip_compiled`: it cannot take inputs_embeds without input ids). Two ways to run the
stack, chosen per call:
- compiled: torch.compile (inductor) of the stack, a graph of the PoC's own with the token count
  dynamic (one compilation serves every batch shape); the norms, rotary embedding, activations and
  reflections are fused, as vLLM's compiled prefill fuses them. On vLLM's FlashAttention backend,
  attention runs straight over the batch's own keys and values, with nothing written to the KV
  cache (engine_ext.seams.direct_attention); on a CUDA build, each layer's q/k norms and rotary
  embedding run as vLLM's one fused kernel (engine_ext.seams.fused_qk_norm_rope), and the routed
  experts of MoE layers compute their activation inside the gate/up projection
  (engine_ext.seams.fused_moe_swiglu). Past its attention, the last layer computes only each sequence's
  last token, the one row its artifact reads (engine_ext.poc.layer_stack.layer_on_rows);
- eager: vLLM's own kernels (seams.platform_kernels), one op at a time.
While a batch's forward runs, a helper thread generates the inputs of the batch announced next and the
nonce-dependent part of its head (picked coordinates, rotation vectors). The head's arithmetic on the last hidden
states is launched right behind the forward (unchecked_head_vectors: nothing in it waits for the device), so
between two forwards only reading back the vectors and the batch's finiteness flag is left. On a GPU the host
launches a forward far ahead of its kernels (about 70 of 420 ms on the H200's MoE shape); the helper starts once
the forward and the head are launched, while this thread waits for them in torch.cuda.synchronize without holding
the GIL, and works on a CUDA stream of its own: its copies and kernels wait for each other only, not behind the
forward's.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import torch

from engine_ext.consensus import (
    HeadPlan,
    NonFiniteBatchError,
    generate_inputs,
    head_plan,
    layer_vectors,
    require_finite,
    unchecked_head_vectors,
)
from engine_ext.poc.batch import BATCH_NON_FINITE, BATCH_OK, PocBatch, PocBatchResult
from engine_ext.poc.forward_metadata import build_forward_metadata
from engine_ext.poc.layer_stack import decoder_layers, reflected_stack
from engine_ext.seams import platform_kernels, seams_for_installed_vllm
from engine_ext.seams.direct_attention import DirectCausalAttention, direct_causal_attention, flash_attention_layers
from engine_ext.seams.fused_moe_swiglu import fused_moe_swiglu, swiglu_expert_stand_ins
from engine_ext.seams.fused_qk_norm_rope import fused_qk_norm_rope, qk_norm_rope_stand_ins, vllm_kernel


class PipelineParallelUnsupported(RuntimeError):
    pass


@dataclass(frozen=True)
class PreparedBatch:
    """What a batch needs besides the model: its input embeddings and its head plan."""

    inputs: torch.Tensor
    head: HeadPlan


class PocWorkerForward:
    def __init__(self, runner: Any) -> None:
        self._runner = runner
        model_config = runner.vllm_config.model_config
        # Activations run in the engine's dtype; the inputs are rounded to the checkpoint's first
        # (poc-v2.md section 3), which a --dtype override does not change.
        self._dtype = model_config.dtype
        self._input_dtype = _checkpoint_dtype(model_config.hf_config, model_config.dtype)
        self._hidden = int(model_config.get_hidden_size())
        if runner.vllm_config.parallel_config.pipeline_parallel_size != 1:
            raise PipelineParallelUnsupported("the PoC forward runs without pipeline parallelism")
        # Half the intra-op threads for the helper (OpenMP's thread count is per calling thread): on
        # a CPU host the forward keeps the other half instead of both fighting over every core.
        helper_threads = max(1, torch.get_num_threads() // 2)
        self._prefetcher = ThreadPoolExecutor(
            max_workers=1,
            thread_name_prefix="poc-inputs",
            initializer=torch.set_num_threads,
            initargs=(helper_threads,),
        )
        self._prefetched: tuple[tuple[Any, ...], Future[PreparedBatch]] | None = None
        self._input_stream = torch.cuda.Stream(runner.device) if runner.device.type == "cuda" else None
        # Reflection vectors of the last block hash (a round reuses them for every batch).
        self._layer_vectors: tuple[str, torch.Tensor] | None = None
        self._stack = decoder_layers(runner.get_model())
        # dynamic=False with the token dimension marked dynamic at each call: every other size
        # (hidden, layer count) stays a constant the kernels are specialized for. Traced and compiled
        # on its first call.
        self._compiled_stack = torch.compile(
            reflected_stack, dynamic=False, options={"guard_filter_fn": symbolic_shape_guards}
        )
        self._seams = seams_for_installed_vllm()
        # Made once: the compiled graph runs with the same stand-in objects every call.
        self._direct_attention = [
            (layer, DirectCausalAttention(layer.impl)) for layer in flash_attention_layers(runner.get_model())
        ]
        self._qk_norm_rope = qk_norm_rope_stand_ins(runner.get_model(), self._dtype, vllm_kernel())
        self._moe_swiglu = swiglu_expert_stand_ins(runner.get_model())

    def run(self, batch: PocBatch, block_ids: list[list[int]], compiled: bool) -> PocBatchResult:
        started = time.perf_counter()
        prepared = self._prepared(batch)
        input_wait = time.perf_counter() - started
        if self._input_stream is None:
            # On a CPU the forward computes as it is called: the helper must start before it to overlap it.
            self._prefetch_next(batch)

        forward_started = time.perf_counter()
        last_hidden = self._forward(batch, prepared.inputs, block_ids, compiled)
        vectors, finite = unchecked_head_vectors(last_hidden, prepared.head)
        if self._input_stream is not None:
            # Made on the helper's stream, read by this one's kernels: the allocator must not hand the memory
            # to the helper again before they are done.
            for made_by_helper in (prepared.inputs, prepared.head.indices, prepared.head.rotations):
                made_by_helper.record_stream(torch.cuda.current_stream(made_by_helper.device))
            self._prefetch_next(batch)
        _synchronize(last_hidden.device)
        head_started = time.perf_counter()
        try:
            require_finite(finite, len(batch.nonces))
        except NonFiniteBatchError as error:
            return PocBatchResult(
                BATCH_NON_FINITE,
                detail=str(error),
                input_wait_seconds=input_wait,
                forward_seconds=head_started - forward_started,
            )
        payload = vectors.cpu().numpy().astype("<f2").tobytes()
        return PocBatchResult(
            BATCH_OK,
            vectors=payload,
            forward_seconds=head_started - forward_started,
            input_wait_seconds=input_wait,
            head_seconds=time.perf_counter() - head_started,
        )

    def close(self) -> None:
        self._prefetcher.shutdown(wait=True, cancel_futures=True)

    def _prefetch_next(self, batch: PocBatch) -> None:
        if batch.next_nonces:
            upcoming = PocBatch(
                batch.block_hash, batch.public_key, batch.next_nonces, batch.seq_len, batch.k_dim, batch.stronger_rng
            )
            self._prefetched = (upcoming.inputs_key(), self._prefetcher.submit(self._prepare, upcoming))

    def _prepared(self, batch: PocBatch) -> PreparedBatch:
        prefetched, self._prefetched = self._prefetched, None
        if prefetched is not None and prefetched[0] == batch.inputs_key():
            return prefetched[1].result()
        return self._prepare(batch)

    def _prepare(self, batch: PocBatch) -> PreparedBatch:
        device = self._runner.device
        on_input_stream = (
            torch.cuda.stream(self._input_stream) if self._input_stream is not None else contextlib.nullcontext()
        )
        with torch.inference_mode(), on_input_stream:
            out = torch.empty((len(batch.nonces), batch.seq_len, self._hidden), dtype=self._input_dtype, device=device)
            generate_inputs(
                out, batch.block_hash, batch.public_key, list(batch.nonces), stronger_rng=batch.stronger_rng
            )
            inputs = out if out.dtype == self._dtype else out.to(self._dtype)
            head = head_plan(batch.block_hash, batch.public_key, batch.nonces, self._hidden, batch.k_dim, device=device)
        if self._input_stream is not None:
            self._input_stream.synchronize()  # complete when the forward and the head get them
        return PreparedBatch(inputs, head)

    # The whole forward runs in inference mode, as vLLM's own model step does: attention backends keep their
    # planning buffers as inference tensors and update them in place while building the metadata (FlashInfer does).
    @torch.inference_mode()
    def _forward(
        self, batch: PocBatch, inputs: torch.Tensor, block_ids: list[list[int]], compiled: bool
    ) -> torch.Tensor:
        """[B, H] last-token hidden states after the final norm."""
        from vllm.forward_context import set_forward_context

        runner = self._runner
        batch_size, seq_len = len(batch.nonces), batch.seq_len
        tokens = inputs.view(batch_size * seq_len, self._hidden)
        vectors = self._vectors_for(batch.block_hash)
        metadata = build_forward_metadata(runner, batch_size, seq_len, block_ids)
        direct = compiled and bool(self._direct_attention)
        attention = direct_causal_attention(self._direct_attention) if direct else contextlib.nullcontext()
        qk_norm_rope = fused_qk_norm_rope(self._qk_norm_rope) if compiled else contextlib.nullcontext()
        moe_swiglu = fused_moe_swiglu(self._moe_swiglu) if compiled else contextlib.nullcontext()
        with (
            set_forward_context(
                metadata.attention,
                runner.vllm_config,
                num_tokens=batch_size * seq_len,
                # Without a slot mapping nothing is written to the KV cache (direct attention never reads it).
                slot_mapping={} if direct else metadata.slot_mapping,
                skip_compiled=True,
            ),
            attention,
            qk_norm_rope,
            moe_swiglu,
        ):
            if compiled:
                last_rows = last_token_rows(batch_size, seq_len, tokens.device)
                return self._compiled(metadata.positions, tokens, vectors, last_rows)[:batch_size]
            with platform_kernels(runner.get_model()):
                hidden = reflected_stack(self._stack.decoder, self._stack.layers, metadata.positions, tokens, vectors)
        return hidden.view(batch_size, seq_len, self._hidden)[:, -1, :]

    def _compiled(
        self, positions: torch.Tensor, tokens: torch.Tensor, vectors: torch.Tensor, kept_rows: torch.Tensor
    ) -> torch.Tensor:
        for dynamic in (tokens, positions, kept_rows):
            torch._dynamo.mark_dynamic(dynamic, 0)
        # Traced with vLLM's IR ops inline, so that inductor fuses them too.
        with self._seams.inlined_ir_ops():
            return self._compiled_stack(self._stack.decoder, self._stack.layers, positions, tokens, vectors, kept_rows)

    def _vectors_for(self, block_hash: str) -> torch.Tensor:
        if self._layer_vectors is None or self._layer_vectors[0] != block_hash:
            first = self._stack.first_index
            indices = range(first, first + len(self._stack.layers))
            vectors = layer_vectors(block_hash, indices, self._hidden, dtype=self._dtype, device=self._runner.device)
            self._layer_vectors = (block_hash, vectors)
        return self._layer_vectors[1]


def last_token_rows(batch_size: int, seq_len: int, device: torch.device) -> torch.Tensor:
    """The row of each sequence's last token in the flattened batch. The compiled stack is dynamic in their count,
    which dynamo allows from 2 on (it specializes the sizes 0 and 1): a lone sequence's row goes twice."""
    rows = torch.arange(seq_len - 1, batch_size * seq_len, seq_len, device=device)
    return rows if batch_size > 1 else rows.repeat(2)


def symbolic_shape_guards(guards: Sequence[Any]) -> list[bool]:
    """Keeps dynamo's guards on the token count's symbolic shape and drops the rest. Dynamo checks its guards
    before every call of a compiled function: here one per module, parameter and attribute the stack's trace
    touched, 0.36 ms a call on the 2-layer embedded model (CPU) and about 4.5 ms on a 48-layer MoE shape, all of
    it host time before the first kernel of the batch while the GPU waits. The stack is called with the same
    modules, stand-ins, dtypes and devices every time; only the token count varies (vLLM drops the same guards
    from its own compiled graphs)."""
    return [guard.guard_type == "SHAPE_ENV" for guard in guards]


def _checkpoint_dtype(hf_config: Any, fallback: torch.dtype) -> torch.dtype:
    declared = getattr(hf_config, "dtype", None) or getattr(hf_config, "torch_dtype", None)
    if isinstance(declared, str):
        declared = getattr(torch, declared, None)
    return declared if isinstance(declared, torch.dtype) else fallback


def _synchronize(device: torch.device) -> None:
    # Forward time means the kernels' time, not the launch's. Waited for here, where the GIL is let go, and not in
    # a copy to the host: on the H200, waiting in `.cpu()` kept the helper from starting until the forward ended.
    if device.type == "cuda":
        torch.cuda.synchronize(device)
