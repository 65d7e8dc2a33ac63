"""An independent PoC v2 forward (poc-v2.md sections 3-5) with Hugging Face transformers, a batch of nonces per forward.

The engine computes artifacts in vLLM's batched forward (engine_ext.poc.worker_forward): its own attention
metadata, borrowed KV blocks, vLLM's decoder layers whose output is the pair (hidden, residual), the reflections
between them. This reference shares none of that: the same checkpoint loaded by transformers' implementation of
its architecture (Qwen3, MiniMax-M2, DeepSeek-V4: dequantized, with the spec's pseudo input ids and optionally
vLLM's sm90 roundings), causal sequences without a KV cache, the reflection applied by a hook to HF's residual-stream
output (DeepSeek-V4's: its 4 hyper-connection streams). What
both share is the consensus core (inputs, layer vectors, reflection formula, head), which the unit tests
check against the spec's conformance vectors on their own. So a disagreement between the engine and this
reference points at the engine's forward (a missing or misplaced reflection, wrong inputs, the wrong token or
norm, positions, masking, aliasing), which is exactly what the end-to-end tests are after. Mind the embedded
model: its random weights give near-uniform attention, so attention-side mistakes move its artifacts by only
about 0.01 (tests/e2e/test_poc_artifacts.py explains how the tests still see them).

Below the reference: small helpers the PoC end-to-end tests share to talk to PocService through raw stubs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import grpc
import numpy as np
import torch

from engine_ext.consensus import head_vectors, inputs_for_nonce, layer_vectors, pseudo_input_ids, reflect
from gonka.mlnode.v1 import poc_pb2, poc_pb2_grpc
from tests.support.deepseek_v4_checkpoint import load_bf16_deepseek_v4
from tests.support.deepseek_v4_sm90 import apply_sm90_numerics

# x, v -> x reflected by v (engine_ext.consensus.reflect unless a test compares another arithmetic).
Reflection = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
Numerics = Literal["plain", "sm90"]


class HfPocReference:
    """An embedded model under transformers, on CPU, in the checkpoint's dtype (bf16)."""

    def __init__(self, model_dir: Path | str, attention: str = "eager", numerics: Numerics = "plain") -> None:
        """`numerics`: "plain" is the checkpoint's dtype throughout; "sm90" (DeepSeek-V4 only) adds what vLLM's
        sm90 kernels round (tests/support/deepseek_v4_sm90.py)."""
        from transformers import AutoConfig, AutoModelForCausalLM

        config = AutoConfig.from_pretrained(str(model_dir))
        # The checkpoint's dtype, not an override: poc-v2.md section 3 casts inputs to it, and the engine
        # serves the same weights in it.
        declared = getattr(config, "dtype", None) or config.torch_dtype
        self.dtype: torch.dtype = declared if isinstance(declared, torch.dtype) else getattr(torch, str(declared))
        self.model_type = str(config.model_type)
        if numerics not in ("plain", "sm90") or (numerics == "sm90" and self.model_type != "deepseek_v4"):
            raise ValueError(f"numerics {numerics!r} is not available for {self.model_type}")
        if self.model_type == "deepseek_v4":
            # Its checkpoint is FP8/MXFP4, which transformers reads only dequantized.
            self.model = load_bf16_deepseek_v4(Path(model_dir))
            if numerics == "sm90":
                apply_sm90_numerics(self.model)
        else:
            self.model = AutoModelForCausalLM.from_pretrained(
                str(model_dir), dtype=self.dtype, attn_implementation=attention
            )
        self.model.eval()
        if self.model_type == "minimax_m2":
            _route_in_float32(self.model, Path(model_dir))
        self.hidden = int(config.hidden_size)
        self.vocab_size = int(config.vocab_size)
        self.num_layers = int(config.num_hidden_layers)

    def vector(
        self,
        block_hash: str,
        public_key: str,
        nonce: int,
        seq_len: int,
        k: int = 12,
        stronger_rng: bool = False,
        reflect_layers: bool = True,
        reflection: Reflection = reflect,
    ) -> np.ndarray:
        """The artifact of one nonce: float16 [k]. `reflect_layers=False` is the plain forward, a negative
        control: the tests use it to show their tolerance tells a forward without reflections apart. `reflection`:
        the arithmetic of one reflection (benchmarks/studies/reflection_order.py compares rounding orders)."""
        return self.vectors(
            block_hash, public_key, [nonce], seq_len, k, stronger_rng, reflect_layers, reflection, batch_size=1
        )[0]

    def vectors(
        self,
        block_hash: str,
        public_key: str,
        nonces: Sequence[int],
        seq_len: int,
        k: int = 12,
        stronger_rng: bool = False,
        reflect_layers: bool = True,
        reflection: Reflection = reflect,
        batch_size: int = 16,
    ) -> np.ndarray:
        """float16 [len(nonces), k]: `vector` of each nonce, `batch_size` sequences per forward (each sequence
        attends only to itself, so batching changes no artifact beyond matmul blocking)."""
        rows = []
        for start in range(0, len(nonces), batch_size):
            chunk = list(nonces[start : start + batch_size])
            inputs = torch.stack(
                [
                    inputs_for_nonce(
                        block_hash, public_key, nonce, seq_len, self.hidden, dtype=self.dtype, stronger_rng=stronger_rng
                    )
                    for nonce in chunk
                ]
            )
            ids = self.input_ids(block_hash, public_key, chunk, seq_len)
            last_hidden = self.last_hidden_batch(block_hash, inputs, ids, reflect_layers, reflection)
            rows.append(head_vectors(last_hidden.float(), block_hash, public_key, chunk, k).numpy())
        return np.concatenate(rows)

    def input_ids(self, block_hash: str, public_key: str, nonces: Sequence[int], seq_len: int) -> torch.Tensor | None:
        """[B, S] the pseudo input ids poc-v2-models.md section 2.2 gives DeepSeek-V4 (its hash-routed layers route
        by them), None for every other model."""
        if self.model_type != "deepseek_v4":
            return None
        ids = pseudo_input_ids(block_hash, public_key, nonces, seq_len, self.vocab_size)
        return ids.reshape(len(nonces), seq_len).long()

    def last_hidden(
        self, block_hash: str, inputs: torch.Tensor, reflect_layers: bool = True, reflection: Reflection = reflect
    ) -> torch.Tensor:
        """[H] last-token hidden state of one sequence after the final norm, with the per-layer reflections applied
        (a model without input ids)."""
        return self.last_hidden_batch(block_hash, inputs.unsqueeze(0), None, reflect_layers, reflection)[0]

    def last_hidden_batch(
        self,
        block_hash: str,
        inputs: torch.Tensor,
        input_ids: torch.Tensor | None,
        reflect_layers: bool = True,
        reflection: Reflection = reflect,
    ) -> torch.Tensor:
        """[B, H] last-token hidden states after the final norm (after DeepSeek-V4's hyper-head collapse) of
        `inputs` [B, S, H], with the per-layer reflections applied. With `input_ids` [B, S], the model runs its own
        forward on them with its embedding's output replaced by `inputs`, so the ids reach the hash routers."""
        # Global layer indices 0..L-1 (this reference is never pipeline-split).
        vectors = layer_vectors(block_hash, range(self.num_layers), self.hidden, dtype=self.dtype)
        layers = self.model.model.layers if reflect_layers else []
        handles = [
            layer.register_forward_hook(_reflecting(vectors[index], reflection)) for index, layer in enumerate(layers)
        ]
        if input_ids is not None:
            handles.append(self.model.model.embed_tokens.register_forward_hook(lambda module, args, output: inputs))
        try:
            with torch.inference_mode():
                # Default positions 0..S-1 per sequence, no cache: poc-v2.md section 3.
                if input_ids is None:
                    output = self.model.model(inputs_embeds=inputs, use_cache=False)
                else:
                    output = self.model.model(input_ids=input_ids, use_cache=False)
        finally:
            for handle in handles:
                handle.remove()
        # last_hidden_state is after the model's final norm (section 5 step 1).
        return output.last_hidden_state[:, -1, :]


def _route_in_float32(model: Any, model_dir: Path) -> None:
    """MiniMax-M2's router as vLLM runs it: the gate's weights and matmul in float32 (vLLM's GateLinear keeps
    float32 parameters and casts the input), the per-expert bias in float32 as the checkpoint stores it
    (transformers casts every tensor to the model's dtype on load). Routing picks the top experts, so a bf16 gate
    would choose other experts on near ties: a difference of the reference, not of the engine under test."""
    from safetensors import safe_open

    with safe_open(str(model_dir / "model.safetensors"), framework="pt") as checkpoint:
        for index, layer in enumerate(model.model.layers):
            layer.mlp.gate.float()
            layer.mlp.e_score_correction_bias = checkpoint.get_tensor(
                f"model.layers.{index}.block_sparse_moe.e_score_correction_bias"
            ).float()


def _reflecting(vector: torch.Tensor, reflection: Reflection) -> Any:
    def hook(module: torch.nn.Module, args: Any, output: Any) -> Any:
        # transformers 4.57 returns the stream as a tensor; older versions return a tuple whose first
        # element is the stream. In HF the layer's output IS the whole residual stream (the residual was
        # already added inside the layer), so reflecting it alone is the spec's map. DeepSeek-V4's output is its
        # hyper-connection streams [B, S, 4, H], reflected stream by stream along the last dimension: what
        # poc-v2-models.md section 4.3 derives from reflecting vLLM's x and its 4 residual streams, hc_post being
        # linear and mixing only across streams.
        if isinstance(output, torch.Tensor):
            return reflection(output, vector)
        return (reflection(output[0], vector), *output[1:])

    return hook


def l2_distance(a: np.ndarray, b: np.ndarray) -> float:
    """The network's comparison (poc-v2.md section 7): fp16 vectors widened to float32."""
    return float(np.linalg.norm(a.astype(np.float32) - b.astype(np.float32)))


def decode_batch_vectors(nonces: Iterable[int], vectors: bytes, k: int) -> list[tuple[int, np.ndarray]]:
    """An ArtifactBatch's columns as (nonce, float16 [k]) pairs, in the batch's order (duplicates kept)."""
    nonce_list = list(nonces)
    flat = np.frombuffer(vectors, dtype="<f2")
    if flat.size != len(nonce_list) * k:
        raise ValueError(
            f"batch of {len(nonce_list)} nonces carries {flat.size} float16 values, expected {len(nonce_list) * k}"
        )
    rows = flat.reshape(len(nonce_list), k)
    return [(nonce, rows[i].copy()) for i, nonce in enumerate(nonce_list)]


# --- the server's side, through raw PocService stubs ----------------------------------------------------------

RPC_TIMEOUT = 120.0


def artifacts_request(
    model: str,
    nonces: Sequence[int],
    seq_len: int,
    block_hash: str,
    public_key: str,
    k: int | None = 12,
    stronger_rng: bool = False,
    batch_size: int | None = None,
) -> poc_pb2.ComputeArtifactsRequest:
    """A ComputeArtifacts request; `k=None` or `batch_size=None` leave the field unset (the server's default)."""
    params = poc_pb2.PocParams(model=model, seq_len=seq_len)
    if k is not None:
        params.k_dim = k
    request = poc_pb2.ComputeArtifactsRequest(
        block_hash=block_hash, public_key=public_key, params=params, stronger_rng=stronger_rng, nonces=list(nonces)
    )
    if batch_size is not None:
        request.batch_size = batch_size
    return request


def compute_batches(
    stub: poc_pb2_grpc.PocServiceStub, request: poc_pb2.ComputeArtifactsRequest
) -> list[poc_pb2.ArtifactBatch]:
    return [response.batch for response in stub.ComputeArtifacts(request, timeout=RPC_TIMEOUT)]


def rows_of(batches: Iterable[poc_pb2.ArtifactBatch], k: int) -> list[tuple[int, np.ndarray]]:
    rows: list[tuple[int, np.ndarray]] = []
    for batch in batches:
        if batch.k_dim != k:
            raise AssertionError(f"batch {batch.sequence} has k_dim {batch.k_dim}, expected {k}")
        rows.extend(decode_batch_vectors(batch.nonces, batch.vectors, k))
    return rows


def one_forward(
    stub: poc_pb2_grpc.PocServiceStub, request: poc_pb2.ComputeArtifactsRequest
) -> list[tuple[int, np.ndarray]]:
    """The vectors of the request's nonces, which must have come back as exactly ONE batch of exactly those
    nonces in that order: a test then knows which nonces shared the forward (the server would split a batch
    when KV blocks are short, or send several when batch_size is smaller than the list)."""
    batches = compute_batches(stub, request)
    shape = [(batch.sequence, list(batch.nonces)) for batch in batches]
    if shape != [(1, list(request.nonces))]:
        raise AssertionError(f"expected one batch of {list(request.nonces)}, got {shape}")
    return rows_of(batches, request.params.k_dim if request.params.HasField("k_dim") else 12)


@dataclass(frozen=True)
class Placement:
    """A node's place in a mining round (StartRoundRequest's node_id/node_count/group_id/group_count)."""

    node_id: int = 1
    node_count: int = 3
    group_id: int = 1
    group_count: int = 2

    def nonce(self, x: int) -> int:
        # poc-v2.md section 8, written out here rather than taken from engine_ext.consensus, so the tests check
        # the server's nonce assignment against the spec's text.
        return self.node_id + self.group_id * self.node_count + x * (self.group_count * self.node_count)


@dataclass
class Subscription:
    """What one SubscribeArtifacts call delivered."""

    batches: list[poc_pb2.ArtifactBatch] = field(default_factory=list)
    lost: list[poc_pb2.ArtifactsLost] = field(default_factory=list)
    end: poc_pb2.SubscriptionEnd | None = None


def subscribe(stub: poc_pb2_grpc.PocServiceStub, round_id: str, stop_after_batches: int | None = None) -> Subscription:
    """Reads a round's artifact stream until its end, or until `stop_after_batches` batches (then cancels)."""
    seen = Subscription()
    call = stub.SubscribeArtifacts(poc_pb2.SubscribeArtifactsRequest(round_id=round_id), timeout=RPC_TIMEOUT)
    try:
        for event in call:
            if event.round_id != round_id:
                raise AssertionError(f"an event of round {event.round_id!r} on the subscription to {round_id!r}")
            kind = event.WhichOneof("event")
            if kind == "batch":
                seen.batches.append(event.batch)
                if stop_after_batches is not None and len(seen.batches) >= stop_after_batches:
                    break
            elif kind == "lost":
                seen.lost.append(event.lost)
            else:
                seen.end = event.end
    finally:
        call.cancel()
    return seen


def running_round_id(stub: poc_pb2_grpc.PocServiceStub) -> str | None:
    try:
        status = stub.GetRoundStatus(poc_pb2.GetRoundStatusRequest(), timeout=30).status
    except grpc.RpcError as error:
        if error.code() == grpc.StatusCode.NOT_FOUND:  # no round has run on this server yet
            return None
        raise
    return status.round_id if status.state in (poc_pb2.ROUND_STATE_GENERATING, poc_pb2.ROUND_STATE_STOPPING) else None


def stop_running_round(stub: poc_pb2_grpc.PocServiceStub) -> None:
    """Best effort, for fixtures' teardown: a round left running refuses inference to every later test."""
    with contextlib.suppress(grpc.RpcError):
        round_id = running_round_id(stub)
        if round_id is not None:
            stub.StopRound(poc_pb2.StopRoundRequest(round_id=round_id), timeout=RPC_TIMEOUT)
