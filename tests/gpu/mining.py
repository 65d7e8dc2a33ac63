"""A short mining round, as the GPU check runs it: start, read a few batches, try inference meanwhile, stop."""

from __future__ import annotations

from contextlib import closing
from dataclasses import dataclass

from gonka.mlnode.client import InferenceClient, ServerError, batch_b64
from gonka.mlnode.v1 import poc_pb2
from gonka.mlnode.v1 import validation_pb2 as vpb

# A fixed round, so every run computes the same nonces' artifacts.
BLOCK_HASH = "3c9e2f1a7b6d5c4e8f0a1b2c3d4e5f60718293a4b5c6d7e8f9001122334455aa"
PUBLIC_KEY = "gonka1gpucheck7x2v9w4m6k3p8r5t1y0u2i4o6a8s0d"
SEQ_LEN = 64
K = 12
BATCH_SIZE = 8
PROBE_PROMPT = [9707, 1879, 11, 419]
# The statistical test ValidatePocArtifacts applies to a round's own artifacts: any honest recomputation passes it.
OWN_ARTIFACTS_STAT_TEST = dict(dist_threshold=0.2, p_mismatch=0.1, p_value_threshold=0.05)


@dataclass(frozen=True)
class Recomputed:
    # Each claim's L2 distance to the server's recomputation, in the claims' order.
    distances: list[float]
    summary: vpb.PocValidationSummary


@dataclass(frozen=True)
class MinedRound:
    model: str
    batches: list[poc_pb2.ArtifactBatch]
    # What a Generate got while the round ran (None: it was served, which the gate must not allow).
    inference_refusal: ServerError | None
    stopped: poc_pb2.RoundStatus


def mine(client: InferenceClient, batch_count: int) -> MinedRound:
    model = client.model_info().served_model_name
    started = client.poc.start_round(
        block_hash=BLOCK_HASH,
        public_key=PUBLIC_KEY,
        model=model,
        seq_len=SEQ_LEN,
        k_dim=K,
        batch_size=BATCH_SIZE,
        timeout=120,
    )
    try:
        batches = _first_batches(client, started.round_id, batch_count)
        inference_refusal = _try_inference(client)
    finally:
        stopped = client.poc.stop_round(started.round_id, timeout=120)
    return MinedRound(model, batches, inference_refusal, stopped)


def _first_batches(client: InferenceClient, round_id: str, count: int) -> list[poc_pb2.ArtifactBatch]:
    batches = []
    with closing(client.poc.subscribe_artifacts(round_id, timeout=300)) as events:
        for event in events:
            if event.HasField("batch"):
                batches.append(event.batch)
                if len(batches) == count:
                    break
    return batches


def _try_inference(client: InferenceClient) -> ServerError | None:
    try:
        client.generate(token_ids=PROBE_PROMPT, max_tokens=2, timeout=60)
    except ServerError as refusal:
        return refusal
    return None


def recompute_own_artifacts(client: InferenceClient, mined: MinedRound) -> Recomputed:
    """The server's ValidatePocArtifacts of the round's own artifacts. Validation batches the claims its own way, not
    as the round did, so the distances are how far the engine's numerics move with the batch a nonce rides in."""
    claims = [claim for batch in mined.batches for claim in batch_b64(batch)]
    responses = list(
        client.poc.validate_poc_artifacts(
            claims=claims,
            block_hash=BLOCK_HASH,
            public_key=PUBLIC_KEY,
            model=mined.model,
            seq_len=SEQ_LEN,
            k_dim=K,
            timeout=300,
            **OWN_ARTIFACTS_STAT_TEST,
        )
    )
    distances = [
        distance for response in responses if response.HasField("progress") for distance in response.progress.distances
    ]
    assert responses[-1].HasField("summary") and len(distances) == len(claims), responses[-1]
    return Recomputed(distances, responses[-1].summary)
