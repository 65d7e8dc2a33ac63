"""The batched PoC forward, in each worker (poc-v2.md sections 3-6; poc-v2-models.md; ../shared/vllm-seams.md
5.2-5.4).

One forward per batch of nonces on the loaded model: inputs written by the consensus core into their own tensor
(never KV-cache storage), positions 0..S-1 per nonce, DeepSeek-V4's pseudo input ids where the decoder needs them,
attention metadata built for this call per KV-cache group, the decoder layers with the reflections between them
(engine_ext.poc.layer_stack over the model's PocDecoder, engine_ext.poc.decoders: code only a PoC forward runs, so
the inference path never sees a reflection). The model's own compiled graph is never used (`skip_compiled`: it
cannot take inputs_embeds without input ids). Two ways to run the stack, chosen per call:
- compiled (for decoders vLLM itself compiles): each layer step compiled once per layer kind and reused across the
  layers (engine_ext.poc.compiled_layers); the norms, rotary embedding, activations and reflections are fused, as
  vLLM's compiled prefill fuses them. On vLLM's FlashAttention backend, attention runs straight over the batch's
  own keys and values, with nothing written to the KV cache (engine_ext.seams.direct_attention); on a CUDA build,
  Qwen3's q/k norms and rotary embedding run as vLLM's one fused kernel (engine_ext.seams.fused_qk_norm_rope), and
  the routed experts of MoE layers compute their activation inside the gate/up projection
  (engine_ext.seams.fused_moe_swiglu). Past its attention, the last layer computes only each sequence's last
  token, the one row its artifact reads, where the decoder can;
- eager: vLLM's own kernels (seams.platform_kernels), one op at a time.
While a batch's forward runs, a helper thread generates the inputs of the batch announced next and the
nonce-dependent part of its head (picked coordinates, rotation vectors). The head's arithmetic on the last hidden
states is launched right behind the forward (unchecked_head_vectors: nothing in it waits for the device), so
between two forwards only reading back the vectors and the nonces' outcomes is left. A nonce whose hidden row or
vector is not usable has no artifact; the rest of its batch keeps theirs (poc-v2-models.md section 5). On a GPU the
host launches a forward far ahead of its kernels (about 70 of 420 ms on the H200's MoE shape); the helper starts
once the forward and the head are launched, while this thread waits for them in torch.cuda.synchronize without
holding the GIL, and works on a CUDA stream of its own: its copies and kernels wait for each other only, not behind
the forward's.
"""

from __future__ import annotations

import contextlib
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import torch

from engine_ext.consensus import (
    HeadPlan,
    generate_inputs,
    head_plan,
    layer_vectors,
    pseudo_input_ids,
    unchecked_head_vectors,
)
from engine_ext.poc.batch import BATCH_OK, PocBatch, PocBatchResult
from engine_ext.poc.compiled_layers import CompiledLayers
from engine_ext.poc.decoders import decoder_for, reflection_vectors_needed
from engine_ext.poc.forward_metadata import build_forward_metadata
from engine_ext.poc.layer_stack import run_stack
from engine_ext.seams import platform_kernels, seams_for_installed_vllm
from engine_ext.seams.direct_attention import DirectCausalAttention, direct_causal_attention, flash_attention_layers
from engine_ext.seams.fused_moe_swiglu import fused_moe_swiglu, swiglu_expert_stand_ins
from engine_ext.seams.fused_qk_norm_rope import fused_qk_norm_rope, qk_norm_rope_stand_ins, vllm_kernel


class PipelineParallelUnsupported(RuntimeError):
    pass


@dataclass(frozen=True)
class PreparedBatch:
    """What a batch needs besides the model: its input embeddings, its pseudo input ids (None unless the decoder
    reads input ids) and its head plan."""

    inputs: torch.Tensor
    input_ids: torch.Tensor | None
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
        # The modulus of DeepSeek-V4's pseudo input ids (poc-v2-models.md section 2.2: hf_config.vocab_size).
        self._vocab_size = int(model_config.get_vocab_size())
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
        self.decoder = decoder_for(runner.get_model())
        # Traced and compiled on its first call; None where vLLM runs the model eagerly (the compiled forward is
        # then the eager one).
        self._compiled_layers = CompiledLayers() if self.decoder.compiles else None
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
        last_hidden = self._forward(batch, prepared, block_ids, compiled)
        vectors, outcomes = unchecked_head_vectors(last_hidden, prepared.head)
        if self._input_stream is not None:
            # Made on the helper's stream, read by this one's kernels: the allocator must not hand the memory
            # to the helper again before they are done.
            made = (prepared.inputs, prepared.input_ids, prepared.head.indices, prepared.head.rotations)
            for made_by_helper in (tensor for tensor in made if tensor is not None):
                made_by_helper.record_stream(torch.cuda.current_stream(made_by_helper.device))
            self._prefetch_next(batch)
        _synchronize(last_hidden.device)
        head_started = time.perf_counter()
        payload = vectors.cpu().numpy().astype("<f2").tobytes()
        return PocBatchResult(
            BATCH_OK,
            vectors=payload,
            outcomes=[int(outcome) for outcome in outcomes.cpu().tolist()],
            forward_seconds=head_started - forward_started,
            input_wait_seconds=input_wait,
            head_seconds=time.perf_counter() - head_started,
            compiled_graphs=0 if self._compiled_layers is None else self._compiled_layers.graphs,
            compile_seconds=0.0 if self._compiled_layers is None else self._compiled_layers.compile_seconds,
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
            input_ids = (
                pseudo_input_ids(
                    batch.block_hash, batch.public_key, batch.nonces, batch.seq_len, self._vocab_size, device=device
                )
                if self.decoder.needs_input_ids
                else None
            )
            head = head_plan(batch.block_hash, batch.public_key, batch.nonces, self._hidden, batch.k_dim, device=device)
        if self._input_stream is not None:
            self._input_stream.synchronize()  # complete when the forward and the head get them
        return PreparedBatch(inputs, input_ids, head)

    # The whole forward runs in inference mode, as vLLM's own model step does: attention backends keep their
    # planning buffers as inference tensors and update them in place while building the metadata (FlashInfer does).
    @torch.inference_mode()
    def _forward(
        self, batch: PocBatch, prepared: PreparedBatch, block_ids: list[list[int]], compiled: bool
    ) -> torch.Tensor:
        """[B, H] last-token hidden states after the final norm."""
        from vllm.forward_context import set_forward_context

        runner = self._runner
        compiled = compiled and self._compiled_layers is not None
        batch_size, seq_len = len(batch.nonces), batch.seq_len
        tokens = prepared.inputs.view(batch_size * seq_len, self._hidden)
        vectors = self._vectors_for(batch.block_hash)
        metadata = build_forward_metadata(runner, batch_size, seq_len, block_ids)
        last_rows = last_token_rows(batch_size, seq_len, tokens.device)
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
                assert self._compiled_layers is not None
                # Traced with vLLM's IR ops inline, so that inductor fuses them too.
                with self._seams.inlined_ir_ops():
                    hidden = self._compiled_layers(
                        self.decoder, metadata.positions, tokens, prepared.input_ids, vectors, last_rows
                    )
            else:
                with platform_kernels(runner.get_model()):
                    hidden = run_stack(self.decoder, metadata.positions, tokens, prepared.input_ids, vectors, last_rows)
        return hidden[:batch_size]

    def _vectors_for(self, block_hash: str) -> torch.Tensor:
        if self._layer_vectors is None or self._layer_vectors[0] != block_hash:
            indices = reflection_vectors_needed(self.decoder)
            vectors = layer_vectors(block_hash, indices, self._hidden, dtype=self._dtype, device=self._runner.device)
            self._layer_vectors = (block_hash, vectors)
        return self._layer_vectors[1]


def last_token_rows(batch_size: int, seq_len: int, device: torch.device) -> torch.Tensor:
    """The row of each sequence's last token in the flattened batch. The compiled stack is dynamic in their count,
    which dynamo allows from 2 on (it specializes the sizes 0 and 1): a lone sequence's row goes twice."""
    rows = torch.arange(seq_len - 1, batch_size * seq_len, seq_len, device=device)
    return rows if batch_size > 1 else rows.repeat(2)


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
