"""The GPU check's core, on the model under test (MLNODE_GPU_MODEL_DIR; conftest.py): streamed generation with
top-5 logprobs, structured output and its replay through ValidateInference (and a token-id generation's replay,
which needs neither chat nor grammar), a mining round that closes the inference gate, and the round's own artifacts
validated by the same node."""

from __future__ import annotations

import json
import math

import grpc
import jsonschema
import pytest

from gonka.mlnode.client import Generation, InferenceClient, build_request, inference_item
from gonka.mlnode.v1 import inference_pb2 as pb
from gonka.mlnode.v1 import poc_pb2
from tests.gpu.mining import BATCH_SIZE, K, MinedRound, mine, recompute_own_artifacts

PROMPT_IDS = [9707, 1879, 11, 419, 374, 264, 1273]  # "Hello world, this is a test"
TOP_K = 5  # the network's top_logprobs
# Bounded, so that even random weights reach the end of it.
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 8},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}
# The chain's inference threshold for Qwen3-235B and its PoC statistical test.
INFERENCE_THRESHOLD = 0.94
MINED_BATCHES = 3


def test_generate_streams_tokens_with_top5_logprobs(client: InferenceClient) -> None:
    generation = Generation()
    for response in client.stream(
        token_ids=PROMPT_IDS,
        max_tokens=32,
        temperature=1.0,
        seed=7,
        top_logprobs=TOP_K,
        ignore_eos=True,
        max_tokens_per_message=4,
    ):
        generation.add(response)
    output = generation.first
    assert len(output.token_ids) == 32 and output.finish_reason == "length"
    assert output.messages >= 32 // 4  # streamed, at most 4 tokens a message
    assert len(output.logprobs.logprobs) == len(output.logprobs.top_ids) == 32
    for position, token in enumerate(output.token_ids):
        top_ids, top = output.logprobs.top_ids[position], output.logprobs.top_logprobs[position]
        assert len(set(top_ids)) == len(top) == TOP_K, position
        assert all(math.isfinite(value) and value <= 0.0 for value in top), (position, top)
        assert top == sorted(top, reverse=True), (position, top)
        chosen = output.logprobs.logprobs[position]
        assert math.isfinite(chosen) and chosen <= top[0], (position, chosen)
        if token in top_ids:
            assert chosen == top[top_ids.index(token)]


@pytest.fixture(scope="module")
def structured(client: InferenceClient) -> tuple[pb.GenerateRequest, Generation]:
    """A seeded JSON-schema generation as an executor serves and records it (the chain's top-5 lists)."""
    fields = dict(
        messages=[("user", "Describe a person as JSON.")],
        json_schema=json.dumps(SCHEMA),
        max_tokens=200,
        temperature=0.7,
        seed=14,
        top_logprobs=TOP_K,
        include_text=True,
    )
    return build_request(**fields), client.generate(build_request(**fields, chain_top_logprobs=True))


def test_json_schema_output_parses_and_matches_the_schema(structured: tuple[pb.GenerateRequest, Generation]) -> None:
    _, generation = structured
    assert generation.first.finish_reason == "stop", generation.first
    jsonschema.validate(json.loads(generation.first.text), SCHEMA)


def test_a_replay_of_that_generation_passes_validate_inference(
    client: InferenceClient, structured: tuple[pb.GenerateRequest, Generation]
) -> None:
    request, generation = structured
    assert_the_replay_passes(client, request, generation)


def test_a_replay_of_a_token_id_generation_passes_validate_inference(client: InferenceClient) -> None:
    """The same without chat or grammar, so that it runs on any model: a shape variant served with the Qwen tokenizer
    whose chat tokens and EOS lie past its rows (DeepSeek-V4's 129,280) refuses the chat prompt above."""
    fields = dict(token_ids=PROMPT_IDS, max_tokens=32, temperature=0.7, seed=21, top_logprobs=TOP_K)
    assert_the_replay_passes(
        client, build_request(**fields), client.generate(build_request(**fields, chain_top_logprobs=True))
    )


def assert_the_replay_passes(client: InferenceClient, request: pb.GenerateRequest, generation: Generation) -> None:
    """The node's own record, replayed with its tokens enforced, is within the chain's distance of itself."""
    output = generation.first
    item = inference_item(request, output.token_ids, output.logprobs.chain_top, threshold=INFERENCE_THRESHOLD)
    [response] = client.validate_inference([item], timeout=300)
    assert response.WhichOneof("outcome") == "verdict", response
    verdict = response.verdict
    print(f"replay of {len(output.token_ids)} tokens: distance {verdict.distance:.3g}")
    assert verdict.passed and verdict.replayed_tokens == len(output.token_ids), verdict
    assert 0.0 <= verdict.distance < 1e-3, verdict


@pytest.fixture(scope="module")
def mined(client: InferenceClient) -> MinedRound:
    return mine(client, MINED_BATCHES)


def test_a_mining_round_streams_artifacts_and_refuses_inference_meanwhile(mined: MinedRound) -> None:
    assert [batch.sequence for batch in mined.batches] == list(range(1, MINED_BATCHES + 1))
    assert all(len(batch.nonces) == BATCH_SIZE and batch.k_dim == K for batch in mined.batches)
    refusal = mined.inference_refusal
    assert refusal is not None, "Generate was served while the round ran"
    assert (refusal.code, refusal.reason) == (grpc.StatusCode.UNAVAILABLE, "POC_IN_PROGRESS")
    assert mined.stopped.state == poc_pb2.ROUND_STATE_STOPPED and mined.stopped.rejected_batches == 0


def test_inference_is_served_again_after_the_round(client: InferenceClient, mined: MinedRound) -> None:
    assert not client.server_status().inference_gate_closed
    assert len(client.generate(token_ids=PROMPT_IDS, max_tokens=4, temperature=0.0).first.token_ids) == 4


def test_the_rounds_own_artifacts_pass_validate_poc_artifacts(client: InferenceClient, mined: MinedRound) -> None:
    recomputed = recompute_own_artifacts(client, mined)
    print(f"{len(recomputed.distances)} artifacts recomputed: max L2 {max(recomputed.distances):.4g}")
    summary = recomputed.summary
    assert (summary.n_total, summary.n_mismatch, summary.fraud_detected) == (MINED_BATCHES * BATCH_SIZE, 0, False), (
        summary
    )
