"""The Python client and the CLI against the real server's PocService and ValidatePocArtifacts:
a mining round subscribed to until it is stopped, artifacts of explicit nonces recomputed, claims
validated, and a subscription that resumes across a dropped connection.

Every round a test starts is stopped in a finally: a running round refuses inference to every other
test sharing the server.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pytest
from grpc_health.v1 import health_pb2

from gonka.mlnode.client import POC_SERVICE, AsyncInferenceClient, InferenceClient, ServerError, batch_b64, decode_batch
from gonka.mlnode.client.artifacts import vector_from_b64
from gonka.mlnode.v1 import inference_pb2, poc_pb2
from tests.support.server_process import REPO_ROOT, ServerProcess
from tests.support.tcp_proxy import TcpProxy

INFERENCE_SERVICE = inference_pb2.DESCRIPTOR.services_by_name["InferenceService"].full_name
SERVING, NOT_SERVING = health_pb2.HealthCheckResponse.SERVING, health_pb2.HealthCheckResponse.NOT_SERVING
SEQ_LEN = 64
BATCH_SIZE = 8
DEFAULT_K = 12
# This node's place: node 1 of 3, group 1 of 2, so the nonce formula's every term is exercised.
PLACE = {"node_id": 1, "node_count": 3, "group_id": 1, "group_count": 2}
ROUND = {
    "block_hash": "0x" + "ab" * 32,
    "block_height": 1234,
    "public_key": "client-poc-test-key",
    "seq_len": SEQ_LEN,
    "batch_size": BATCH_SIZE,
    **PLACE,
}
ARTIFACT_PARAMS = {key: ROUND[key] for key in ("block_hash", "public_key", "seq_len")}
# The deployed test's strict distance (poc-v2.md section 7), with the network's binomial parameters.
THRESHOLDS = {"dist_threshold": 0.02, "p_mismatch": 0.1, "p_value_threshold": 0.05}
BATCHES_BEFORE_STOP = 3
CALL_TIMEOUT = 120.0


def nonce(x: int, node_id: int = 1, node_count: int = 3, group_id: int = 1, group_count: int = 2) -> int:
    return node_id + group_id * node_count + x * (group_count * node_count)


@dataclass
class MinedRound:
    model: str
    started: poc_pb2.RoundStatus
    batches: list[poc_pb2.ArtifactBatch]
    end: poc_pb2.SubscriptionEnd
    stopped: poc_pb2.RoundStatus
    health_during: dict[str, int]
    health_after: dict[str, int]

    def claims(self) -> list[tuple[int, str]]:
        return [pair for batch in self.batches for pair in batch_b64(batch)]

    def vectors(self) -> dict[int, np.ndarray]:
        return {nonce: vector for batch in self.batches for nonce, vector in decode_batch(batch)}


def health_of(client: InferenceClient) -> dict[str, int]:
    return {name: client.health(name) for name in (POC_SERVICE, INFERENCE_SERVICE)}


@pytest.fixture(scope="module")
def mined(server: ServerProcess) -> MinedRound:
    """One round: subscribed to, stopped after a few batches, subscription read to its end."""
    with InferenceClient(server.target) as client:
        model = client.model_info().served_model_name
        started = client.poc.start_round(model=model, **ROUND, timeout=CALL_TIMEOUT)
        batches: list[poc_pb2.ArtifactBatch] = []
        ends: list[poc_pb2.SubscriptionEnd] = []
        responses = client.poc.subscribe_artifacts(started.round_id, timeout=CALL_TIMEOUT)
        try:
            health_during = health_of(client)
            for response in responses:
                if response.HasField("batch"):
                    batches.append(response.batch)
                if len(batches) == BATCHES_BEFORE_STOP:
                    break
        finally:
            stopped = client.poc.stop_round(started.round_id, timeout=CALL_TIMEOUT)
        # The same subscription goes on: what was produced before the stop, then its end.
        for response in responses:
            assert not response.HasField("lost"), response
            if response.HasField("batch"):
                batches.append(response.batch)
            else:
                ends.append(response.end)
        return MinedRound(
            model,
            started,
            batches,
            ends[0] if ends else poc_pb2.SubscriptionEnd(),
            stopped,
            health_during,
            health_of(client),
        )


def test_a_round_streams_its_nonces_in_order_until_it_is_stopped(mined: MinedRound) -> None:
    assert mined.started.state == poc_pb2.ROUND_STATE_GENERATING and len(mined.started.round_id) == 32
    parameters = mined.started.parameters
    assert (parameters.params.k_dim, parameters.batch_size, parameters.node_count, parameters.group_count) == (
        DEFAULT_K,
        BATCH_SIZE,
        3,
        2,
    )
    assert mined.health_during == {POC_SERVICE: SERVING, INFERENCE_SERVICE: NOT_SERVING}
    assert mined.health_after == {POC_SERVICE: SERVING, INFERENCE_SERVICE: SERVING}

    assert [batch.sequence for batch in mined.batches] == list(range(1, len(mined.batches) + 1))
    assert len(mined.batches) >= BATCHES_BEFORE_STOP and all(len(batch.nonces) == BATCH_SIZE for batch in mined.batches)
    produced = [n for batch in mined.batches for n in batch.nonces]
    assert produced == [nonce(x) for x in range(len(produced))]
    vectors = np.stack(list(mined.vectors().values()))
    assert vectors.shape == (len(produced), DEFAULT_K) and np.isfinite(vectors).all()

    assert mined.end.reason == poc_pb2.SUBSCRIPTION_END_REASON_ROUND_STOPPED
    assert mined.end.last_sequence == mined.batches[-1].sequence
    assert mined.stopped.state == poc_pb2.ROUND_STATE_STOPPED
    assert (mined.stopped.nonces_produced, mined.stopped.last_sequence) == (len(produced), mined.end.last_sequence)


def test_compute_artifacts_reproduces_the_rounds_artifacts(server: ServerProcess, mined: MinedRound) -> None:
    """Other batches than the round's (5 a forward, shuffled, one nonce twice): the same vectors
    within the deployed test's distance."""
    round_vectors = mined.vectors()
    chosen = [n for n in list(round_vectors)[::2]][:11]
    nonces = chosen[::-1] + chosen[:1]
    with InferenceClient(server.target) as client:
        batches = list(
            client.poc.compute_artifacts(
                model=mined.model, nonces=nonces, batch_size=5, timeout=CALL_TIMEOUT, **ARTIFACT_PARAMS
            )
        )
    assert [batch.sequence for batch in batches] == [1, 2, 3] and [len(batch.nonces) for batch in batches] == [5, 5, 2]
    computed = [pair for batch in batches for pair in decode_batch(batch)]
    assert [n for n, _ in computed] == nonces
    distances = [
        float(np.linalg.norm(vector.astype(np.float32) - round_vectors[n].astype(np.float32))) for n, vector in computed
    ]
    assert max(distances) <= 0.02, distances


def test_validate_poc_of_the_rounds_artifacts_finds_no_fraud(server: ServerProcess, mined: MinedRound) -> None:
    claims = mined.claims()
    # Half as the network's base64, half as raw float16 bytes: both forms are accepted.
    mixed = [
        (n, text if index % 2 else vector_from_b64(text).astype("<f2").tobytes())
        for index, (n, text) in enumerate(claims)
    ]
    with InferenceClient(server.target) as client:
        responses = list(
            client.poc.validate_poc_artifacts(
                model=mined.model, claims=mixed, timeout=CALL_TIMEOUT, **ARTIFACT_PARAMS, **THRESHOLDS
            )
        )
    progress = [response.progress for response in responses[:-1]]
    assert (
        progress and progress[-1].nonces_checked == len(claims) and all(not any(step.mismatches) for step in progress)
    )
    assert sorted(n for step in progress for n in step.nonces) == sorted(n for n, _ in claims)
    summary = responses[-1].summary
    assert (summary.n_total, summary.n_mismatch, list(summary.mismatch_nonces), summary.fraud_detected) == (
        len(claims),
        0,
        [],
        False,
    )
    assert summary.p_value == 1.0


def test_validate_poc_counts_forged_and_malformed_claims(server: ServerProcess, mined: MinedRound) -> None:
    claims = mined.claims()[:24]
    # A third of the claims carry another nonce's vector, and one is not base64 at all.
    forged = {n for n, _ in claims[:8]}
    shifted = [(n, claims[(index + 1) % 8][1]) for index, (n, _) in enumerate(claims[:8])]
    malformed_nonce = claims[8][0]
    tampered = shifted + [(malformed_nonce, "not base64!")] + claims[9:]
    with InferenceClient(server.target) as client:
        responses = list(
            client.poc.validate_poc_artifacts(
                model=mined.model, claims=tampered, timeout=CALL_TIMEOUT, **ARTIFACT_PARAMS, **THRESHOLDS
            )
        )
    distances = {n: d for step in (r.progress for r in responses[:-1]) for n, d in zip(step.nonces, step.distances)}
    assert np.isnan(distances[malformed_nonce]) and all(distances[n] > 0.02 for n in forged)
    summary = responses[-1].summary
    assert (
        set(summary.mismatch_nonces) == forged | {malformed_nonce} and summary.n_mismatch == 9 and summary.n_total == 24
    )
    assert summary.fraud_detected and summary.p_value < 0.05


# --- the command line -------------------------------------------------------------------------


def cli(server: ServerProcess, *argv: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gonka.mlnode.client", "--target", server.target, *argv],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=CALL_TIMEOUT,
        cwd=REPO_ROOT,
        env=dict(os.environ),
        check=False,
    )


def cli_process(server: ServerProcess, *argv: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "gonka.mlnode.client", "--target", server.target, *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO_ROOT,
        env=dict(os.environ),
    )


def read_to_the_end(process: subprocess.Popen, timeout: float) -> tuple[str, str]:
    """The rest of a process's stdout and stderr once it exits. communicate() would read the pipes'
    descriptors and skip whatever an earlier readline() already pulled into the stream's buffer."""
    with ThreadPoolExecutor(max_workers=2) as readers:
        stdout, stderr = readers.submit(process.stdout.read), readers.submit(process.stderr.read)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()  # closes the pipes, so the readers finish and the pool can shut down
            raise
        return stdout.result(), stderr.result()


ROUND_FLAGS = [
    "--block-hash",
    ROUND["block_hash"],
    "--public-key",
    ROUND["public_key"],
    "--seq-len",
    str(SEQ_LEN),
    "--block-height",
    "1234",
    "--batch-size",
    str(BATCH_SIZE),
    "--node-id",
    "1",
    "--node-count",
    "3",
    "--group-id",
    "1",
    "--group-count",
    "2",
]
ARTIFACT_FLAGS = ["--block-hash", ROUND["block_hash"], "--public-key", ROUND["public_key"], "--seq-len", str(SEQ_LEN)]
THRESHOLD_FLAGS = ["--dist-threshold", "0.02", "--p-mismatch", "0.1", "--p-value-threshold", "0.05"]


@pytest.fixture
def stop_any_round(server: ServerProcess) -> Iterator[None]:
    """For tests whose round a subprocess starts: whatever happens, no round outlives the test."""
    yield
    with InferenceClient(server.target) as client:
        try:
            status = client.poc.round_status(timeout=CALL_TIMEOUT)
        except ServerError as error:
            assert error.reason == "ROUND_NOT_FOUND", error  # no round ever ran: nothing to stop
            return
        if status.state in (poc_pb2.ROUND_STATE_GENERATING, poc_pb2.ROUND_STATE_STOPPING):
            client.poc.stop_round(status.round_id, timeout=CALL_TIMEOUT)


def test_the_cli_runs_a_round_subscribes_and_validates(server: ServerProcess, stop_any_round: None, tmp_path) -> None:
    started = cli(server, "round", "start", *ROUND_FLAGS, "--json")
    assert started.returncode == 0, started.stderr
    status = json.loads(started.stdout)
    round_id = status["round_id"]
    assert status["state"] == "ROUND_STATE_GENERATING" and status["parameters"]["batch_size"] == BATCH_SIZE

    subscriber = cli_process(server, "subscribe", "--round-id", round_id, "--json")
    try:
        try:
            first_lines = [subscriber.stdout.readline() for _ in range(2 * BATCH_SIZE)]
            running = cli(server, "round", "status", "--json")
            assert running.returncode == 0 and json.loads(running.stdout)["state"] == "ROUND_STATE_GENERATING"
        finally:
            stopped = cli(server, "round", "stop", "--round-id", round_id, "--json")
        assert stopped.returncode == 0, stopped.stderr
        assert json.loads(stopped.stdout)["state"] == "ROUND_STATE_STOPPED"
        rest, errors = read_to_the_end(subscriber, CALL_TIMEOUT)
    finally:
        if subscriber.poll() is None:
            subscriber.kill()
            subscriber.communicate()
    assert subscriber.returncode == 0, errors
    end_line = [line for line in errors.splitlines() if line.startswith("end: ")]
    assert end_line and end_line[0].startswith("end: round_stopped at sequence ")
    artifacts = [json.loads(line) for line in first_lines + rest.splitlines() if line.strip()]
    assert all(set(item) == {"nonce", "vector_b64"} for item in artifacts)
    assert [item["nonce"] for item in artifacts] == [nonce(x) for x in range(len(artifacts))]
    assert int(end_line[0].split()[-1]) * BATCH_SIZE == len(artifacts) == json.loads(stopped.stdout)["nonces_produced"]

    # The stopped round stays readable: a text-mode subscription replays it with its progress line.
    replay = cli(server, "subscribe", "--round-id", round_id)
    assert replay.returncode == 0, replay.stderr
    assert (
        replay.stdout.splitlines()[0] == f"batch 1: {BATCH_SIZE} artifacts, nonces {nonce(0)}..{nonce(BATCH_SIZE - 1)}"
    )
    assert (
        f"round {round_id[:8]}: {len(artifacts) // BATCH_SIZE} batches, {len(artifacts)} artifacts, " in replay.stderr
    )

    # validate-poc reads the network's JSON list from a file (progress on stderr, a text verdict) ...
    claims_path = tmp_path / "claims.json"
    claims_path.write_text(json.dumps(artifacts))
    verdict = cli(server, "validate-poc", str(claims_path), *ARTIFACT_FLAGS, *THRESHOLD_FLAGS)
    assert verdict.returncode == 0, verdict.stderr
    assert verdict.stdout == f"no fraud detected: 0 of {len(artifacts)} claims mismatch, p-value 1\n"
    assert f"validate-poc: {len(artifacts)}/{len(artifacts)} checked, 0 mismatches" in verdict.stderr
    # ... and what compute --json prints, from stdin, with a JSON summary.
    nonces = [str(item["nonce"]) for item in artifacts[:BATCH_SIZE]]
    computed = cli(server, "compute", *ARTIFACT_FLAGS, "--json", *nonces)
    assert computed.returncode == 0, computed.stderr
    judged = cli(server, "validate-poc", *ARTIFACT_FLAGS, *THRESHOLD_FLAGS, "--json", stdin=computed.stdout)
    assert judged.returncode == 0, judged.stderr
    assert json.loads(judged.stdout) == {
        "n_total": BATCH_SIZE,
        "n_mismatch": 0,
        "mismatch_nonces": [],
        "p_value": 1.0,
        "fraud_detected": False,
        "kv_blocks_note": "",
    }
    assert judged.stderr == ""  # --json: no progress line


def test_the_cli_reports_the_servers_refusal(server: ServerProcess) -> None:
    refused = cli(server, "compute", *ARTIFACT_FLAGS, "--model", "no-such-model", "1")
    assert refused.returncode == 1
    assert "FAILED_PRECONDITION MODEL_MISMATCH (field params.model)" in refused.stderr
    unknown = cli(server, "round", "stop", "--round-id", "0" * 32)
    assert unknown.returncode == 1 and "NOT_FOUND ROUND_NOT_FOUND" in unknown.stderr


# --- resuming across a dropped connection -----------------------------------------------------


def test_a_followed_subscription_resumes_after_the_connection_drops(server: ServerProcess) -> None:
    retries: list[int] = []
    with TcpProxy(server.port) as proxy, InferenceClient(proxy.target) as client:
        model = client.model_info().served_model_name
        started = client.poc.start_round(model=model, **ROUND, timeout=CALL_TIMEOUT)
        events = []
        try:
            for event in client.poc.follow_artifacts(
                retry_delay=0.2, on_retry=lambda error, attempt: retries.append(attempt)
            ):
                events.append(event)
                batches = sum(e.HasField("batch") for e in events)
                if batches == 2 and proxy.connections == 1:
                    assert proxy.cut() == 1
                if batches == 5 and event.HasField("batch"):
                    with InferenceClient(server.target) as direct:
                        direct.poc.stop_round(started.round_id, timeout=CALL_TIMEOUT)
        finally:
            with InferenceClient(server.target) as direct:
                direct.poc.stop_round(started.round_id, timeout=CALL_TIMEOUT)
    assert retries == [1] and proxy.connections >= 2
    assert {event.round_id for event in events} == {started.round_id}
    assert not any(event.HasField("lost") for event in events)
    sequences = [event.batch.sequence for event in events if event.HasField("batch")]
    end = events[-1].end
    assert end.reason == poc_pb2.SUBSCRIPTION_END_REASON_ROUND_STOPPED
    assert sequences == list(range(1, end.last_sequence + 1))  # nothing missed, nothing twice


def test_the_async_client_follows_computes_and_validates(server: ServerProcess) -> None:
    async def scenario() -> tuple[
        list[poc_pb2.SubscribeArtifactsResponse], list[poc_pb2.ArtifactBatch], object, list[int]
    ]:
        retries: list[int] = []
        with TcpProxy(server.port) as proxy:
            async with AsyncInferenceClient(proxy.target) as client:
                model = (await client.model_info()).served_model_name
                started = await client.poc.start_round(model=model, **ROUND, timeout=CALL_TIMEOUT)
                events, stopping = [], False
                try:
                    assert (await client.poc.round_status(timeout=CALL_TIMEOUT)).round_id == started.round_id
                    async for event in client.poc.follow_artifacts(
                        started.round_id, retry_delay=0.2, on_retry=lambda e, a: retries.append(a)
                    ):
                        events.append(event)
                        batches = sum(e.HasField("batch") for e in events)
                        if batches == 1 and proxy.connections == 1:
                            assert proxy.cut() == 1
                        # Stop on the resumed stream: batches relayed before the cut can still be read after it, while
                        # the channel's only connection is gone (a call then fails UNAVAILABLE, seen once in CI).
                        if retries and batches >= 3 and event.HasField("batch") and not stopping:
                            stopping = True
                            await client.poc.stop_round(timeout=CALL_TIMEOUT)
                finally:
                    await client.poc.stop_round(started.round_id, timeout=CALL_TIMEOUT)
                claims = [pair for event in events if event.HasField("batch") for pair in batch_b64(event.batch)]
                computed = [
                    batch
                    async for batch in client.poc.compute_artifacts(
                        model=model, nonces=[n for n, _ in claims[:BATCH_SIZE]], timeout=CALL_TIMEOUT, **ARTIFACT_PARAMS
                    )
                ]
                responses = [
                    r
                    async for r in client.poc.validate_poc_artifacts(
                        model=model, claims=claims, timeout=CALL_TIMEOUT, **ARTIFACT_PARAMS, **THRESHOLDS
                    )
                ]
                return events, computed, responses[-1].summary, retries

    events, computed, summary, retries = asyncio.run(scenario())
    assert retries == [1]
    sequences = [event.batch.sequence for event in events if event.HasField("batch")]
    assert events[-1].end.reason == poc_pb2.SUBSCRIPTION_END_REASON_ROUND_STOPPED
    assert sequences == list(range(1, events[-1].end.last_sequence + 1))
    round_vectors = {n: v for event in events if event.HasField("batch") for n, v in decode_batch(event.batch)}
    for n, vector in (pair for batch in computed for pair in decode_batch(batch)):
        assert np.linalg.norm(vector.astype(np.float32) - round_vectors[n].astype(np.float32)) <= 0.02
    assert (summary.n_total, summary.n_mismatch, summary.fraud_detected) == (len(round_vectors), 0, False)
