"""Nodes on different vLLM releases agree, since the network migrates node by node: artifacts computed
on one supported release validate on the other, and an inference served on one replays on the other,
both ways, on the same model (the embedded one, byte-identical from either release's setup).

This suite runs on one release's interpreter and starts a server from each release's virtualenv;
`make test-all` sets both up. A missing virtualenv fails the suite: the agreement is never skipped.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from gonka.mlnode.client import InferenceClient, batch_b64, build_request, decode_batch, inference_item
from gonka.mlnode.v1 import validation_pb2 as vpb
from tests.support.server_process import REPO_ROOT, SHARED_SERVER_FLAGS, ServerProcess, start_server

# The virtualenv of each supported release, as the Makefile names them.
RELEASE_VENVS = {"0.25.1": REPO_ROOT / ".venv", "0.28.0": REPO_ROOT / ".venv-vllm-0.28.0"}
PROMPTS = [[9707, 1879, 11, 419, 374, 264, 1273], [785, 3974, 13876, 38835, 34208, 916, 279, 15678, 5562, 13]]
# Seeded temperature sampling: free greedy runs of the random-weight model flip near-tied argmaxes
# between releases (../shared/vllm-seams.md 7); replays enforce the tokens, so they must agree anyway.
SAMPLING = dict(max_tokens=32, temperature=0.99, top_logprobs=5)
REPLAY_DISTANCE = 1e-3
ARTIFACT_L2 = 0.02
POC = dict(block_hash="0x" + "5e" * 32, public_key="cross-version-key", seq_len=64)
NONCES = list(range(0, 48, 3))
THRESHOLDS = dict(dist_threshold=ARTIFACT_L2, p_mismatch=0.1, p_value_threshold=0.05)
CALL_TIMEOUT = 300.0


def release_python(release: str) -> str:
    python = RELEASE_VENVS[release] / "bin" / "python"
    if not python.is_file():
        pytest.fail(
            f"vLLM {release} is not set up at {python.parent.parent}: run `make test-all` (or `make setup VLLM={release}`)"
        )
    return str(python)


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ServerProcess]]:
    started: dict[str, ServerProcess] = {}
    try:
        for release in RELEASE_VENVS:
            log_path = tmp_path_factory.mktemp(f"vllm-{release}") / "server.log"
            started[release] = start_server(log_path, SHARED_SERVER_FLAGS, python=release_python(release))
        yield started
    finally:
        for server in started.values():
            server.stop()


def test_each_server_runs_its_release(servers: dict[str, ServerProcess]) -> None:
    for release, server in servers.items():
        with InferenceClient(server.target) as client:
            status = client.server_status(include_engine_processes=True)
        assert status.versions.vllm.split("+")[0] == release
        assert {process.vllm_version.split("+")[0] for process in status.engine_processes} == {release}


@pytest.mark.parametrize(("executor", "validator"), [("0.25.1", "0.28.0"), ("0.28.0", "0.25.1")])
@pytest.mark.parametrize("mode", ["processed", "raw"])
def test_an_inference_served_on_one_release_replays_on_the_other(
    servers: dict[str, ServerProcess], executor: str, validator: str, mode: str
) -> None:
    items = []
    with InferenceClient(servers[executor].target) as client:
        for seed, prompt in enumerate(PROMPTS, start=40):
            request = build_request(token_ids=prompt, seed=seed, logprobs_mode=mode, **SAMPLING)
            served = client.generate(
                build_request(token_ids=prompt, seed=seed, logprobs_mode=mode, chain_top_logprobs=True, **SAMPLING)
            )
            output = served.first
            items.append(
                inference_item(request, output.token_ids, output.logprobs.chain_top, threshold=0.94, mode=mode)
            )
    with InferenceClient(servers[validator].target) as client:
        responses = client.validate_inference(items, timeout=CALL_TIMEOUT)
    assert sorted(response.index for response in responses) == list(range(len(items)))
    print(f"{mode} replay of {executor} on {validator}: distances {[round(r.verdict.distance, 6) for r in responses]}")
    for response in responses:
        verdict = response.verdict
        assert response.WhichOneof("outcome") == "verdict", response
        assert verdict.passed and verdict.failure == vpb.INFERENCE_FAILURE_UNSPECIFIED, verdict
        assert 0 <= verdict.distance < REPLAY_DISTANCE, (executor, validator, verdict.distance)
        assert verdict.replayed_tokens == len(items[response.index].positions.token_ids)


def artifacts_on(server: ServerProcess) -> dict[int, np.ndarray]:
    with InferenceClient(server.target) as client:
        model = client.model_info().served_model_name
        batches = list(client.poc.compute_artifacts(model=model, nonces=NONCES, timeout=CALL_TIMEOUT, **POC))
    return {nonce: vector.astype(np.float32) for batch in batches for nonce, vector in decode_batch(batch)}


def test_artifacts_agree_across_releases_within_the_networks_tolerance(servers: dict[str, ServerProcess]) -> None:
    old, new = artifacts_on(servers["0.25.1"]), artifacts_on(servers["0.28.0"])
    assert sorted(old) == sorted(new) == NONCES
    distances = [float(np.linalg.norm(old[nonce] - new[nonce])) for nonce in NONCES]
    print(f"artifact L2 between releases: max {max(distances):.5f}, mean {np.mean(distances):.5f}")
    assert max(distances) <= ARTIFACT_L2


@pytest.mark.parametrize(("prover", "validator"), [("0.25.1", "0.28.0"), ("0.28.0", "0.25.1")])
def test_artifacts_computed_on_one_release_validate_on_the_other(
    servers: dict[str, ServerProcess], prover: str, validator: str
) -> None:
    with InferenceClient(servers[prover].target) as client:
        model = client.model_info().served_model_name
        claims = [
            pair
            for batch in client.poc.compute_artifacts(model=model, nonces=NONCES, timeout=CALL_TIMEOUT, **POC)
            for pair in batch_b64(batch)
        ]
    with InferenceClient(servers[validator].target) as client:
        responses = list(
            client.poc.validate_poc_artifacts(claims=claims, model=model, timeout=CALL_TIMEOUT, **POC, **THRESHOLDS)
        )
    summary = responses[-1].summary
    assert summary.n_total == len(NONCES) and summary.n_mismatch == 0, summary
    assert not summary.fraud_detected, summary
