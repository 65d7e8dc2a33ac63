"""The network's MiniMax-M2 architecture on this CPU: the embedded tiny MiniMax-M2 (minimax-m2-tiny: grouped-KV
attention with q/k norms over all heads and a partial rotary embedding, 16 experts routed 4 per token by a sigmoid
with a per-expert bias) served, mined, validated and replayed by one server of its own (the production
configuration: the compiled PoC forward, vLLM's compiled graph).

Artifacts are checked against tests/support/poc_reference.py on transformers' own MiniMax-M2 implementation of the
same checkpoint (its router in float32 as vLLM runs it), within L2 0.02 per artifact: both input RNGs, batches of 1,
7 and 32, the same nonce alone and inside a batch of 32. The CPU seams of engine_ext.seams.cpu_router make the
engine's routing the model's (without them the engine dies in its first forward); a router that ignored the bias
would route most tokens elsewhere (tests/unit/test_cpu_router.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import grpc
import numpy as np
import pytest

from engine_ext.consensus import fraud_test, sequence_distance
from gonka.mlnode.client import (
    AsyncInferenceClient,
    Generation,
    InferenceClient,
    ServerError,
    batch_b64,
    build_request,
    inference_item,
)
from gonka.mlnode.v1 import poc_pb2, poc_pb2_grpc, validation_pb2_grpc
from gonka.mlnode.v1 import validation_pb2 as vpb
from server.embedded_model.variants import MINIMAX_M2_MODEL_DIR, MINIMAX_M2_TINY
from tests.support.poc_reference import (
    HfPocReference,
    Placement,
    artifacts_request,
    l2_distance,
    one_forward,
    stop_running_round,
    subscribe,
)
from tests.support.server_process import SHARED_SERVER_FLAGS, ServerProcess, start_server

BLOCK_HASH = "51c2a0e3f7b94d6680a1b2c3d4e5f60718293a4b5c6d7e8f9a0b1c2d3e4f5061"
PUBLIC_KEY = "gonka1minimaxm2tinyq7w3e5r8t2y4u6i1o9p0"
K = 12
SEQ_LEN = 64
TOLERANCE = 0.02
# The chain's PoC statistical test for MiniMax-M2.7 (poc-v2-models.md section 7.3) and its inference threshold.
MINIMAX_STAT_TEST = vpb.PocStatTest(dist_threshold=0.75, p_mismatch=0.10, p_value_threshold=0.05)
# Forged claims of 16: P[Binomial(16, 0.1) >= 6] = 0.0033, fraud at 0.05 (4 would give 0.068: not fraud).
FORGED = 6
INFERENCE_THRESHOLD = 0.922
PROMPT_IDS = [9707, 1879, 11, 419, 374, 264, 1273]
TARGET = 777


@pytest.fixture(scope="module")
def minimax(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    if not (MINIMAX_M2_MODEL_DIR / "build_info.json").is_file():
        pytest.fail(f"the MiniMax-M2 variant is not built at {MINIMAX_M2_MODEL_DIR}: run `make test` (it builds it)")
    process = start_server(
        tmp_path_factory.mktemp("minimax") / "server.log", ["--model", str(MINIMAX_M2_MODEL_DIR), *SHARED_SERVER_FLAGS]
    )
    try:
        yield process
    finally:
        exit_code = process.stop()
    assert exit_code == 0, f"the MiniMax-M2 server exited with {exit_code} on SIGTERM:\n{process.log_tail()}"


@pytest.fixture(scope="module")
def reference() -> HfPocReference:
    return HfPocReference(MINIMAX_M2_MODEL_DIR)


@pytest.fixture
def client(minimax: ServerProcess) -> Iterator[InferenceClient]:
    with InferenceClient(minimax.target) as connected:
        yield connected


@pytest.fixture
def poc(minimax: ServerProcess) -> Iterator[poc_pb2_grpc.PocServiceStub]:
    with grpc.insecure_channel(minimax.target) as channel:
        stub = poc_pb2_grpc.PocServiceStub(channel)
        try:
            yield stub
        finally:
            stop_running_round(stub)


def model_name(client: InferenceClient) -> str:
    return client.model_info().served_model_name


def one_batch(
    poc: poc_pb2_grpc.PocServiceStub, model: str, nonces: list[int], stronger_rng: bool = False
) -> list[tuple[int, np.ndarray]]:
    return one_forward(
        poc, artifacts_request(model, nonces, SEQ_LEN, BLOCK_HASH, PUBLIC_KEY, K, stronger_rng, batch_size=len(nonces))
    )


def test_the_server_runs_the_minimax_decoder_compiled(minimax: ServerProcess, client: InferenceClient) -> None:
    log = minimax.log_path.read_text(errors="replace")
    assert "PoC forward: ResidualPairDecoder on MiniMaxM2ForCausalLM" in log
    # The layers share their graphs: dynamo never reached its recompile limit (which would leave layers eager).
    assert "PoC forward compiled in" in log and "recompile_limit" not in log, log[-3000:]
    assert client.model_info().vocab_size == MINIMAX_M2_TINY.config["vocab_size"]


@pytest.mark.parametrize("stronger_rng", [False, True], ids=["base-rng", "stronger-rng"])
def test_artifacts_equal_the_transformers_reference_alone_and_in_batches_of_7_and_32(
    client: InferenceClient, poc: poc_pb2_grpc.PocServiceStub, reference: HfPocReference, stronger_rng: bool
) -> None:
    model = model_name(client)
    batches = {size: [10_000 * size + i for i in range(size - 1)] for size in (7, 32)}
    batches[7].insert(3, TARGET)
    batches[32].insert(31, TARGET)
    rows = {size: one_batch(poc, model, nonces, stronger_rng) for size, nonces in batches.items()}
    alone = dict(one_batch(poc, model, [TARGET], stronger_rng))[TARGET]
    computed = {nonce: vector for size in rows for nonce, vector in rows[size]}
    distances = {
        nonce: l2_distance(vector, reference.vector(BLOCK_HASH, PUBLIC_KEY, nonce, SEQ_LEN, K, stronger_rng))
        for nonce, vector in computed.items()
    }
    distances["alone"] = l2_distance(alone, reference.vector(BLOCK_HASH, PUBLIC_KEY, TARGET, SEQ_LEN, K, stronger_rng))
    in_batch = {size: dict(rows[size])[TARGET] for size in rows}
    across = {size: l2_distance(vector, alone) for size, vector in in_batch.items()}
    print(
        f"MiniMax-M2, stronger_rng {stronger_rng}: L2 to the HF reference max {max(distances.values()):.6f} over "
        f"{len(distances)} artifacts; nonce {TARGET} alone vs in batches of 7 / 32: {across[7]:.6f} / {across[32]:.6f}"
    )
    assert max(distances.values()) <= TOLERANCE, distances
    assert max(across.values()) <= TOLERANCE, across


def test_the_tolerance_tells_a_forward_without_reflections_apart(
    client: InferenceClient, poc: poc_pb2_grpc.PocServiceStub, reference: HfPocReference
) -> None:
    rows = one_batch(poc, model_name(client), [1, 2, 3, 4, 5, 6, 7, 8])
    plain = [
        l2_distance(vector, reference.vector(BLOCK_HASH, PUBLIC_KEY, nonce, SEQ_LEN, K, reflect_layers=False))
        for nonce, vector in rows
    ]
    print(f"MiniMax-M2 engine vs the unreflected reference: min L2 {min(plain):.4f}")
    assert min(plain) > TOLERANCE, plain


def test_a_mining_round_streams_the_references_artifacts_and_refuses_inference(
    client: InferenceClient, poc: poc_pb2_grpc.PocServiceStub, reference: HfPocReference
) -> None:
    placement = Placement()
    request = poc_pb2.StartRoundRequest(
        block_hash=BLOCK_HASH,
        public_key=PUBLIC_KEY,
        node_id=placement.node_id,
        node_count=placement.node_count,
        group_id=placement.group_id,
        group_count=placement.group_count,
        batch_size=8,
        params=poc_pb2.PocParams(model=model_name(client), seq_len=SEQ_LEN, k_dim=K),
    )
    started = poc.StartRound(request, timeout=120).status
    try:
        live = subscribe(poc, started.round_id, stop_after_batches=2)
        with pytest.raises(ServerError) as refused:
            client.generate(token_ids=PROMPT_IDS, max_tokens=2)
    finally:
        stopped = poc.StopRound(poc_pb2.StopRoundRequest(round_id=started.round_id), timeout=120).status
    assert (refused.value.code, refused.value.reason) == (grpc.StatusCode.UNAVAILABLE, "POC_IN_PROGRESS")
    assert stopped.state == poc_pb2.ROUND_STATE_STOPPED and stopped.nonces_failed == 0
    mined = [
        (nonce, vector)
        for batch in live.batches
        for nonce, vector in zip(batch.nonces, np.frombuffer(batch.vectors, "<f2").reshape(-1, K))
    ]
    assert [nonce for nonce, _ in mined] == [placement.nonce(x) for x in range(16)]
    distances = [
        l2_distance(vector, reference.vector(BLOCK_HASH, PUBLIC_KEY, nonce, SEQ_LEN, K)) for nonce, vector in mined
    ]
    print(f"MiniMax-M2 mining round: max L2 to the HF reference {max(distances):.6f}")
    assert max(distances) <= TOLERANCE, distances
    assert len(client.generate(token_ids=PROMPT_IDS, max_tokens=3, temperature=0.0).first.token_ids) == 3


def test_validate_poc_artifacts_with_minimax_thresholds(
    client: InferenceClient, poc: poc_pb2_grpc.PocServiceStub, minimax: ServerProcess
) -> None:
    model = model_name(client)
    request = artifacts_request(model, list(range(40, 56)), SEQ_LEN, BLOCK_HASH, PUBLIC_KEY, K, batch_size=16)
    (batch,) = [response.batch for response in poc.ComputeArtifacts(request, timeout=120)]
    claims = [vpb.ClaimedArtifact(nonce=nonce, vector_b64=b64) for nonce, b64 in batch_b64(batch)]
    # A prover that copied other nonces' vectors for six claims: unrelated unit vectors, about 1.4 apart.
    forged = [
        vpb.ClaimedArtifact(nonce=claim.nonce, vector_b64=claims[(index + 8) % 16].vector_b64)
        if index < FORGED
        else claim
        for index, claim in enumerate(claims)
    ]
    with grpc.insecure_channel(minimax.target) as channel:
        validation = validation_pb2_grpc.ValidationServiceStub(channel)
        verdicts = {}
        for name, sent in (("honest", claims), ("forged", forged)):
            validate = vpb.ValidatePocArtifactsRequest(
                block_hash=BLOCK_HASH,
                public_key=PUBLIC_KEY,
                params=poc_pb2.PocParams(model=model, seq_len=SEQ_LEN),
                artifacts=sent,
                stat_test=MINIMAX_STAT_TEST,
                batch_size=16,
            )
            verdicts[name] = list(validation.ValidatePocArtifacts(validate, timeout=120))[-1].summary
    assert (verdicts["honest"].n_total, verdicts["honest"].n_mismatch, verdicts["honest"].fraud_detected) == (
        16,
        0,
        False,
    )
    assert verdicts["honest"].n_not_computable == 0
    assert (verdicts["forged"].n_mismatch, list(verdicts["forged"].mismatch_nonces)) == (
        FORGED,
        list(range(40, 40 + FORGED)),
    )
    expected = fraud_test(FORGED, 16, MINIMAX_STAT_TEST.p_mismatch, MINIMAX_STAT_TEST.p_value_threshold)
    assert verdicts["forged"].p_value == pytest.approx(expected.p_value) and verdicts["forged"].fraud_detected


# --- inference and its validation ---------------------------------------------------------------------------------


def chain_positions(generation: Generation) -> list[tuple[int, dict[int, float]]]:
    return list(zip(generation.first.token_ids, generation.first.logprobs.chain_top))


@pytest.mark.parametrize("mode", ["raw", "processed"])
def test_the_servers_own_generations_replay_below_0_001_and_pass_validate_inference(
    client: InferenceClient, mode: str
) -> None:
    fields = dict(
        token_ids=PROMPT_IDS, max_tokens=16, temperature=0.9, top_k=20, seed=21, top_logprobs=5, logprobs_mode=mode
    )
    request = build_request(**fields)
    original = client.generate(build_request(**fields, chain_top_logprobs=True))
    replay = client.generate(
        build_request(**fields, chain_top_logprobs=True, enforced_token_ids=original.first.token_ids)
    )
    assert replay.first.token_ids == original.first.token_ids and len(original.first.token_ids) == 16
    assert 0 <= sequence_distance(chain_positions(original), chain_positions(replay)) < 0.001
    item = inference_item(
        request, original.first.token_ids, original.first.logprobs.chain_top, threshold=INFERENCE_THRESHOLD, mode=mode
    )
    (response,) = client.validate_inference([item], timeout=300)
    assert response.WhichOneof("outcome") == "verdict" and response.verdict.passed, response
    assert response.verdict.distance < 0.001 and response.verdict.replayed_tokens == 16


def test_a_replay_that_breaks_its_grammar_completes_unconstrained(minimax: ServerProcess) -> None:
    off_grammar = [1, 2, 3, 4, 5]  # "\"", "#", "$", "%", "&": no 3-digit code of the pattern starts so

    async def scenario() -> tuple[Generation, Generation]:
        async with AsyncInferenceClient(minimax.target) as aio:
            common = dict(
                token_ids=PROMPT_IDS,
                temperature=0.0,
                top_logprobs=3,
                logprobs_mode="raw",
                max_tokens=len(off_grammar) + 1,
            )
            broken = await aio.generate(**common, regex="[0-9]{3}-[a-z]{2}", enforced_token_ids=off_grammar)
            return broken, await aio.generate(**common, enforced_token_ids=off_grammar)

    broken, unconstrained = asyncio.run(scenario())
    assert broken.first.token_ids == unconstrained.first.token_ids and broken.first.token_ids[:5] == off_grammar
    assert broken.first.logprobs.logprobs[0] == -9999.0  # the grammar held at the first position
    assert broken.first.logprobs.logprobs[1:] == pytest.approx(unconstrained.first.logprobs.logprobs[1:], abs=1e-5)


def test_the_vocabulary_bound_is_the_models_own(client: InferenceClient) -> None:
    """MiniMax-M2's 200 064 rows, beyond the Qwen tokenizer's 151 669 ids: an id up to vocab_size - 1 is the model's."""
    last = MINIMAX_M2_TINY.config["vocab_size"] - 1
    assert client.model_info().tokenizer_max_token_id < last
    assert len(client.generate(token_ids=[*PROMPT_IDS, last], max_tokens=2, temperature=0.0).first.token_ids) == 2
    with pytest.raises(ServerError) as refused:
        client.generate(token_ids=[*PROMPT_IDS, last + 1], max_tokens=2)
    assert (refused.value.code, refused.value.reason, refused.value.field) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "TOKEN_OUT_OF_VOCABULARY",
        "token_ids.ids[7]",
    )
    assert f"(ids 0..{last})" in refused.value.message
