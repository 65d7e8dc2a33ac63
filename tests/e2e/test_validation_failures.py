"""The failure paths of ValidateInference and ValidatePocArtifacts against real servers (issue 26): a verdict is only
given on a replay that reached the record's own end, validation's engine requests stay within the stream bound, the
"could not serve" probe asks for one token, and one bad claim hides nothing.

A validator server with a short context (256 tokens), a bound of 3 streams and engine faults that only test servers
have (tests/support/engine_faults.py: a request of seed FAULT_SEED fails in the engine after a few tokens; the PoC
forward of NON_FINITE_NONCE is NaN). Records too long for it, and references the faults would spoil, come from the
suite's shared server (the same model, its whole 8192-token context). SIGTERM during a validation runs on a server of
its own."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest

from gonka.mlnode.client import InferenceClient, build_request, inference_item
from gonka.mlnode.v1 import poc_pb2, poc_pb2_grpc, validation_pb2_grpc
from gonka.mlnode.v1 import validation_pb2 as vpb
from tests.support.engine_faults import fault_environment
from tests.support.server_process import SERVER_LAYER_FLAGS, ServerProcess, engine_environment, start_server

PROMPT_IDS = [9707, 1879, 11, 419, 374, 264, 1273]
THRESHOLD = 0.94
CONTEXT = 256
STREAM_BOUND = 3
FAULT_SEED = 4242
FAULT_AFTER_TOKENS = 6
NON_FINITE_NONCE = 103
K = 12
POC_TEST = vpb.PocStatTest(dist_threshold=0.2, p_mismatch=0.1, p_value_threshold=0.05)


@pytest.fixture(scope="module")
def validator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    faults = {"fail_seed": FAULT_SEED, "fail_after_tokens": FAULT_AFTER_TOKENS, "non_finite_nonces": [NON_FINITE_NONCE]}
    flags = ["--max-model-len", str(CONTEXT), "--max-concurrent-streams", str(STREAM_BOUND), *SERVER_LAYER_FLAGS]
    process = start_server(
        tmp_path_factory.mktemp("validator") / "server.log", flags, env=fault_environment(engine_environment(), faults)
    )
    yield process
    assert process.stop() == 0, process.log_tail()


@pytest.fixture
def validating(validator: ServerProcess) -> Iterator[InferenceClient]:
    with InferenceClient(validator.target) as connected:
        yield connected


def record(client: InferenceClient, **fields) -> tuple[dict, list[int], list[dict[int, float]]]:
    """An executor's honest record: the request's fields, its tokens and chain lists (processed, top-5)."""
    fields = dict(token_ids=PROMPT_IDS, temperature=1.0, top_logprobs=5, logprobs_mode="processed") | fields
    output = client.generate(build_request(**fields, chain_top_logprobs=True), timeout=300).first
    return fields, output.token_ids, output.logprobs.chain_top


def by_index(responses: list[vpb.ValidateInferenceResponse]) -> dict[int, vpb.ValidateInferenceResponse]:
    return {response.index: response for response in responses}


def test_a_replay_cut_by_this_nodes_context_is_an_item_error_not_a_verdict(
    client: InferenceClient, validating: InferenceClient
) -> None:
    # The executor's request stated no max_tokens: its own context let it write 300 tokens, more than the validator's has.
    fields, tokens, lists = record(client, max_tokens=300, ignore_eos=True, seed=5)
    request = build_request(**{name: value for name, value in fields.items() if name != "max_tokens"})
    too_long = inference_item(request, tokens, lists, threshold=THRESHOLD)
    fitting = inference_item(request, tokens[:100], lists[:100], threshold=THRESHOLD)
    results = by_index(validating.validate_inference([too_long, fitting], timeout=300))
    assert results[0].WhichOneof("outcome") == "error", results[0]
    error = results[0].error
    assert (error.code, error.reason, error.field, error.retryable) == (
        "INVALID_ARGUMENT",
        "CONTEXT_LENGTH_EXCEEDED",
        "positions.token_ids",
        False,
    )
    # A record that fits is judged (here it is the executor's first 100 tokens: its replay runs on past them).
    assert (
        results[1].verdict.failure == vpb.INFERENCE_FAILURE_LENGTH_DIFFERS
        and results[1].verdict.first_differing_position == 100
    )


def test_a_replay_the_engine_fails_is_a_retryable_item_error_not_a_verdict(
    client: InferenceClient, validating: InferenceClient
) -> None:
    failing_fields, failing_tokens, failing_lists = record(client, max_tokens=30, ignore_eos=True, seed=FAULT_SEED)
    fields, tokens, lists = record(client, max_tokens=30, ignore_eos=True, seed=7)
    items = [
        inference_item(build_request(**failing_fields), failing_tokens, failing_lists, threshold=THRESHOLD),
        inference_item(build_request(**fields), tokens, lists, threshold=THRESHOLD),
    ]
    results = by_index(validating.validate_inference(items, timeout=300))
    assert results[0].WhichOneof("outcome") == "error", results[0]
    error = results[0].error
    assert (error.code, error.reason, error.retryable) == ("UNAVAILABLE", "REPLAY_INCOMPLETE", True)
    assert f"after {FAULT_AFTER_TOKENS}" in error.message or "engine failed" in error.message
    assert results[1].verdict.passed, results[1]


def test_the_could_not_serve_probe_generates_one_token(validating: InferenceClient) -> None:
    # The network's requests carry min_tokens >= 64 and often no max_tokens: the probe must not generate them.
    servable = build_request(token_ids=PROMPT_IDS, min_tokens=64, temperature=1.0, seed=3)
    impossible = build_request(token_ids=PROMPT_IDS, min_tokens=64, max_tokens=4)  # refused by Generate's own checks
    items = [
        vpb.InferenceItem(request=request, threshold=THRESHOLD, executor_could_not_serve=True)
        for request in (servable, impossible)
    ]
    results = by_index(validating.validate_inference(items, timeout=300))
    served = results[0].verdict
    assert (served.passed, served.failure, served.replayed_tokens) == (
        False,
        vpb.INFERENCE_FAILURE_EXECUTOR_COULD_NOT_SERVE,
        1,
    ), results[0]
    assert results[1].verdict.passed and results[1].verdict.similarity == 1.0  # nobody can serve it


def test_the_replays_of_a_call_stay_within_the_stream_bound(validating: InferenceClient) -> None:
    records = [record(validating, max_tokens=120, ignore_eos=True, seed=20 + index) for index in range(8)]
    items = [
        inference_item(build_request(**fields), tokens, lists, threshold=THRESHOLD) for fields, tokens, lists in records
    ]
    responses: list[vpb.ValidateInferenceResponse] = []
    call = threading.Thread(target=lambda: responses.extend(validating.validate_inference(items, timeout=600)))
    in_engine: list[int] = []
    call.start()
    while call.is_alive():
        status = validating.server_status()
        in_engine.append(status.running_requests + status.waiting_requests)
        time.sleep(0.02)
    call.join()
    assert sorted(response.index for response in responses) == list(range(len(items)))
    assert all(response.verdict.passed for response in responses), responses
    # One call of eight items never puts more requests into the engine than the server's bound.
    assert max(in_engine) <= STREAM_BOUND, in_engine
    assert max(in_engine) >= 2, in_engine  # the replays did run concurrently, within the bound


def test_a_non_finite_nonce_hides_no_other_claim(
    server: ServerProcess, client: InferenceClient, validator: ServerProcess
) -> None:
    model = client.model_info().served_model_name
    params = poc_pb2.PocParams(model=model, seq_len=64)
    nonces = list(range(100, 108))
    with grpc.insecure_channel(server.target) as channel:  # references from the shared server, which has no faults
        request = poc_pb2.ComputeArtifactsRequest(
            block_hash="nf-block", public_key="nf-key", params=params, nonces=nonces, batch_size=8
        )
        computed = {}
        for message in poc_pb2_grpc.PocServiceStub(channel).ComputeArtifacts(request):
            for index, nonce in enumerate(message.batch.nonces):
                computed[nonce] = message.batch.vectors[2 * K * index : 2 * K * (index + 1)]
    tampered = 105
    rng = np.random.default_rng(0)
    claims = [
        vpb.ClaimedArtifact(
            nonce=nonce,
            vector_f16=rng.standard_normal(K).astype("<f2").tobytes() if nonce == tampered else computed[nonce],
        )
        for nonce in nonces
    ]
    with grpc.insecure_channel(validator.target) as channel:
        responses = list(
            validation_pb2_grpc.ValidationServiceStub(channel).ValidatePocArtifacts(
                vpb.ValidatePocArtifactsRequest(
                    block_hash="nf-block",
                    public_key="nf-key",
                    params=params,
                    artifacts=claims,
                    stat_test=POC_TEST,
                    batch_size=8,
                )
            )
        )
    summary = responses[-1].summary
    judged = {
        nonce: (distance, mismatch)
        for response in responses[:-1]
        for nonce, distance, mismatch in zip(
            response.progress.nonces, response.progress.distances, response.progress.mismatches
        )
    }
    assert sorted(judged) == nonces  # every claim has its own entry
    assert np.isnan(judged[NON_FINITE_NONCE][0]) and not judged[NON_FINITE_NONCE][1]  # not computable here: no mismatch
    assert judged[tampered][1] and list(summary.mismatch_nonces) == [
        tampered
    ]  # the batch's non-finite nonce hid nothing
    assert all(
        judged[nonce][0] < 0.2 and not judged[nonce][1] for nonce in nonces if nonce not in (tampered, NON_FINITE_NONCE)
    )
    assert (summary.n_total, summary.n_mismatch, summary.n_not_computable) == (8, 1, 1)


def test_sigterm_during_a_validation_gives_retryable_item_errors_not_verdicts(tmp_path: Path) -> None:
    server = start_server(tmp_path / "server.log", ["--shutdown-grace", "1", *SERVER_LAYER_FLAGS])
    try:
        with InferenceClient(server.target) as executor:
            records = [record(executor, max_tokens=300, ignore_eos=True, seed=40 + index) for index in range(4)]
        items = [
            inference_item(build_request(**fields), tokens, lists, threshold=THRESHOLD)
            for fields, tokens, lists in records
        ]
        responses: list[vpb.ValidateInferenceResponse] = []
        failures: list[BaseException] = []

        def validate() -> None:
            with InferenceClient(server.target) as validating:
                try:
                    responses.extend(validating.validate_inference(items, timeout=300))
                except BaseException as error:  # the call's own outcome is asserted below
                    failures.append(error)

        def generate() -> None:  # a long stream beside it: shutdown waits the grace for it, then aborts everything
            with InferenceClient(server.target) as streaming:
                streaming.generate(token_ids=PROMPT_IDS, max_tokens=6000, ignore_eos=True, timeout=300)

        threads = [threading.Thread(target=generate), threading.Thread(target=validate)]
        for thread in threads:
            thread.start()
        with InferenceClient(server.target) as watching:
            deadline = time.monotonic() + 120
            while watching.server_status().running_requests < 1 + len(items) and time.monotonic() < deadline:
                time.sleep(0.05)
        server.signal(signal.SIGTERM)
        for thread in threads:
            thread.join(120)
        assert server.wait(90) == 0, server.log_tail()
    finally:
        server.stop()
    assert not failures, failures  # the call itself ended OK, each item answered
    assert sorted(response.index for response in responses) == list(range(len(items)))
    errors = [response.error for response in responses if response.WhichOneof("outcome") == "error"]
    verdicts = [response.verdict for response in responses if response.WhichOneof("outcome") == "verdict"]
    assert all(verdict.passed for verdict in verdicts), verdicts  # never a LENGTH_DIFFERS for a replay the shutdown cut
    assert errors, "no replay was cut by the shutdown"
    assert all((error.reason, error.retryable) == ("SHUTTING_DOWN", True) for error in errors), errors
