"""The Go client (clients/go) against the real server: its example command streams what the Python
client gets, token for token and logprob for logprob, and it decodes the server's rich errors; it
drives a mining round and prints its artifacts exactly as a Python subscriber receives them, also
across a dropped connection.

Every round a test starts is stopped in a finally: a running round refuses inference to every other
test sharing the server.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2

from gonka.mlnode.client import InferenceClient, ServerError
from gonka.mlnode.v1 import poc_pb2, poc_pb2_grpc
from tests.support.server_process import REPO_ROOT, ServerProcess
from tests.support.tcp_proxy import TcpProxy

MESSAGES = [("system", "You are terse."), ("user", "Name three colours.")]
SAMPLING = {"max_tokens": 16, "temperature": 0.8, "seed": 11}


def without_token() -> dict[str, str]:
    """The environment less the token variable: the shared server has no token."""
    return {name: value for name, value in os.environ.items() if name != "MLNODE_AUTH_TOKEN"}


def run_example(binary: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(binary), *args], capture_output=True, text=True, timeout=120, env=without_token())


def chat_args(server: ServerProcess, **sampling: float) -> list[str]:
    args = ["chat", "--target", server.target]
    for role, content in MESSAGES:
        args += ["--message", f"{role}:{content}"]
    for name, value in sampling.items():
        args += [f"--{name.replace('_', '-')}", str(value)]
    return args


def json_lines(stdout: str) -> Iterator[dict]:
    return (json.loads(line) for line in stdout.splitlines())


def test_streamed_tokens_and_logprobs_equal_the_python_clients(
    server: ServerProcess, client: InferenceClient, go_example: Path
) -> None:
    ran = run_example(go_example, *chat_args(server, **SAMPLING, top_logprobs=5), "--json")
    assert ran.returncode == 0, ran.stderr
    lines = list(json_lines(ran.stdout))
    tokens = [line for line in lines if "id" in line]
    (finish,) = [line for line in lines if "finish" in line]

    expected = client.generate(messages=MESSAGES, **SAMPLING, top_logprobs=5).first
    assert [t["position"] for t in tokens] == list(range(len(expected.token_ids)))
    assert [t["id"] for t in tokens] == expected.token_ids
    # Exactly: the Go command prints each float32 widened to float64, as Python reads it.
    assert [t["logprob"] for t in tokens] == expected.logprobs.logprobs
    assert [t["rank"] for t in tokens] == expected.logprobs.ranks
    assert [t["top_ids"] for t in tokens] == expected.logprobs.top_ids
    assert [t["top_logprobs"] for t in tokens] == expected.logprobs.top_logprobs
    assert (finish["finish"], finish["completion_tokens"]) == (expected.finish_reason, len(expected.token_ids))
    assert len(tokens) == 16 and all(len(t["top_ids"]) == 5 for t in tokens)


def test_streamed_text_equals_the_python_clients(
    server: ServerProcess, client: InferenceClient, go_example: Path
) -> None:
    ran = run_example(go_example, *chat_args(server, **SAMPLING))
    assert ran.returncode == 0, ran.stderr
    expected = client.generate(messages=MESSAGES, **SAMPLING, include_text=True).first
    assert ran.stdout == expected.text and expected.text
    assert f"[output 0: {expected.finish_reason}, {len(expected.token_ids)} tokens]" in ran.stderr


def test_an_invalid_argument_decodes_to_its_field_and_reason(
    server: ServerProcess, client: InferenceClient, go_example: Path
) -> None:
    ran = run_example(go_example, *chat_args(server, max_tokens=4, temperature=-0.5), "--json")
    assert ran.returncode == 1, (ran.stdout, ran.stderr)
    (line,) = json_lines(ran.stdout)
    error = line["error"]
    assert error["code"] == "INVALID_ARGUMENT"
    assert (error["reason"], error["domain"]) == ("INVALID_FIELD", "mlnode.gonka.ai")
    assert [v["field"] for v in error["field_violations"]] == ["sampling.temperature"]
    assert error["metadata"] == {"field": "sampling.temperature"}
    assert "retry_delay_seconds" not in error  # only UNAVAILABLE answers carry one
    # The same decoding as the Python client's.
    with pytest.raises(ServerError) as caught:
        client.generate(messages=MESSAGES, max_tokens=4, temperature=-0.5)
    assert caught.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert (caught.value.reason, caught.value.field, caught.value.message) == (
        error["reason"],
        "sampling.temperature",
        error["message"],
    )
    assert "INVALID_ARGUMENT" in ran.stderr and "field sampling.temperature" in ran.stderr


def test_health_is_read_per_service(server: ServerProcess, client: InferenceClient, go_example: Path) -> None:
    services = ["gonka.mlnode.v1.InferenceService", "gonka.mlnode.v1.ValidationService"]
    ran = run_example(go_example, "health", "--target", server.target, *services)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines() == [f"{service} SERVING" for service in services]
    assert all(client.health(service) == health_pb2.HealthCheckResponse.SERVING for service in services)
    unknown = run_example(go_example, "health", "--target", server.target, "gonka.mlnode.v1.NoSuchService")
    assert unknown.returncode == 1 and unknown.stdout == "gonka.mlnode.v1.NoSuchService SERVICE_UNKNOWN\n"


# --- PoC: rounds and artifact subscriptions -------------------------------------------------------

ROUND = dict(block_hash="go-block", block_height=21, public_key="go-key", batch_size=8)
SEQ_LEN = 64
BATCHES = 3


@pytest.fixture
def poc(server: ServerProcess) -> Iterator[poc_pb2_grpc.PocServiceStub]:
    with grpc.insecure_channel(server.target) as channel:
        yield poc_pb2_grpc.PocServiceStub(channel)


def start_round(poc: poc_pb2_grpc.PocServiceStub, client: InferenceClient) -> poc_pb2.RoundStatus:
    params = poc_pb2.PocParams(model=client.model_info().served_model_name, seq_len=SEQ_LEN)
    return poc.StartRound(poc_pb2.StartRoundRequest(params=params, **ROUND), timeout=60).status


def stop_round(poc: poc_pb2_grpc.PocServiceStub, round_id: str) -> poc_pb2.RoundStatus:
    """Stopping a round that has already ended only returns its status: safe in every finally."""
    return poc.StopRound(poc_pb2.StopRoundRequest(round_id=round_id), timeout=60).status


def python_artifacts(poc: poc_pb2_grpc.PocServiceStub, round_id: str) -> dict[int, list[tuple[int, str]]]:
    """Per sequence, the (nonce, vector_b64) pairs a Python subscriber receives: the stopped round's
    whole buffer, read to its SubscriptionEnd. The codec is written out here (k float16 values,
    standard base64) so that it is not the code under test."""
    by_sequence = {}
    for response in poc.SubscribeArtifacts(poc_pb2.SubscribeArtifactsRequest(round_id=round_id), timeout=60):
        assert response.round_id == round_id and not response.HasField("lost")
        if response.HasField("batch"):
            batch, width = response.batch, 2 * response.batch.k_dim
            by_sequence[batch.sequence] = [
                (nonce, base64.b64encode(batch.vectors[width * i : width * (i + 1)]).decode())
                for i, nonce in enumerate(batch.nonces)
            ]
    assert response.end.reason == poc_pb2.SUBSCRIPTION_END_REASON_ROUND_STOPPED
    return by_sequence


def go_artifacts(stdout: str, round_id: str) -> dict[int, list[tuple[int, str]]]:
    """Per sequence, what `subscribe --json` printed, in order."""
    by_sequence: dict[int, list[tuple[int, str]]] = {}
    for line in json_lines(stdout):
        assert line["round_id"] == round_id, line
        by_sequence.setdefault(line["sequence"], []).append((line["nonce"], line["vector_b64"]))
    return by_sequence


def test_subscribe_prints_what_a_python_subscriber_receives(
    server: ServerProcess, client: InferenceClient, poc, go_example: Path
) -> None:
    started = start_round(poc, client)
    try:
        # The running round, unnamed: the Go client finds it as the server's default.
        ran = run_example(go_example, "subscribe", "--target", server.target, "--json", "--max-batches", str(BATCHES))
    finally:
        stopped = stop_round(poc, started.round_id)
    assert ran.returncode == 0, ran.stderr
    printed = go_artifacts(ran.stdout, started.round_id)
    expected = python_artifacts(poc, started.round_id)
    assert list(printed) == list(range(1, BATCHES + 1))
    assert printed == {sequence: expected[sequence] for sequence in printed}
    assert all(len(pairs) == ROUND["batch_size"] for pairs in printed.values())

    # Text mode, on the stopped round: its whole buffer, one "NONCE VECTOR_B64" line per artifact,
    # then the end (on stderr) and exit status 0.
    whole = run_example(go_example, "subscribe", "--target", server.target, "--round-id", started.round_id)
    assert whole.returncode == 0, whole.stderr
    assert whole.stdout.splitlines() == [f"{nonce} {text}" for pairs in expected.values() for nonce, text in pairs]
    assert f"round ended: round_stopped after batch {stopped.last_sequence}" in whole.stderr
    assert len(expected) == stopped.last_sequence

    # --json output is a claims file as it stands: the Python CLI validates it, and finds it honest.
    validate = [
        sys.executable,
        "-m",
        "gonka.mlnode.client",
        "--target",
        server.target,
        "validate-poc",
        "-",
        "--json",
        "--block-hash",
        ROUND["block_hash"],
        "--public-key",
        ROUND["public_key"],
        "--seq-len",
        str(SEQ_LEN),
        "--dist-threshold",
        "0.2",
        "--p-mismatch",
        "0.1",
        "--p-value-threshold",
        "0.05",
    ]
    validated = subprocess.run(
        validate, input=ran.stdout, capture_output=True, text=True, timeout=120, cwd=REPO_ROOT, env=without_token()
    )
    assert validated.returncode == 0, validated.stderr
    summary = json.loads(validated.stdout.splitlines()[-1])
    assert (summary["n_total"], summary["n_mismatch"], summary["fraud_detected"]) == (
        BATCHES * ROUND["batch_size"],
        0,
        False,
    )


def test_subscribe_resumes_after_a_dropped_connection(
    server: ServerProcess, client: InferenceClient, poc, go_example: Path
) -> None:
    # A batch of 8 x 64 takes about 4 ms on the shared server: 1,000 batches keep the round streaming for
    # seconds, so the cut lands before the last one even when the Go process starts late on a loaded machine
    # (50 were all produced within 0.2 s, and a client that arrived later got them in one burst before the cut).
    batches = 1000
    with TcpProxy(server.port) as proxy:
        started = start_round(poc, client)
        try:
            args = [
                "subscribe",
                "--target",
                proxy.target,
                "--json",
                "--max-batches",
                str(batches),
                "--round-id",
                started.round_id,
            ]
            process = subprocess.Popen(
                [str(go_example), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=without_token()
            )
            try:
                lines, cuts = [], 0
                for line in process.stdout:
                    lines.append(line)
                    # Cut once, mid-stream: after the first artifact of batch 2 has been printed.
                    if json.loads(line)["sequence"] == 2 and not cuts:
                        cuts = proxy.cut()
                stderr = process.stderr.read()
                assert process.wait(timeout=60) == 0, stderr
            finally:
                if process.poll() is None:
                    process.kill()
                    process.wait()
        finally:
            stop_round(poc, started.round_id)
    assert cuts == 1 and proxy.connections == 2 and "subscribe: reconnecting (attempt 1): UNAVAILABLE" in stderr
    printed = go_artifacts("".join(lines), started.round_id)
    expected = python_artifacts(poc, started.round_id)
    # Nothing missed, nothing twice: the resume asked for the batches after the last one handled.
    assert list(printed) == list(range(1, batches + 1))
    assert printed == {sequence: expected[sequence] for sequence in printed}


def test_rounds_are_driven_from_go(server: ServerProcess, client: InferenceClient, poc, go_example: Path) -> None:
    def round_command(*args: str) -> dict:
        ran = run_example(go_example, "round", *args, "--target", server.target)
        assert ran.returncode == 0, ran.stderr
        (line,) = json_lines(ran.stdout)
        return line

    flags = [
        "--block-hash",
        ROUND["block_hash"],
        "--public-key",
        ROUND["public_key"],
        "--seq-len",
        str(SEQ_LEN),
        "--batch-size",
        "8",
    ]
    started = round_command("start", *flags)
    try:
        assert started["state"] == "ROUND_STATE_GENERATING" and len(started["round_id"]) == 32
        parameters = started["parameters"]
        # --model unset: the served model, asked of the server; k_dim unset: the server's default.
        assert parameters["params"] == {"model": client.model_info().served_model_name, "seq_len": SEQ_LEN, "k_dim": 12}
        assert (parameters["block_hash"], parameters["public_key"], parameters["batch_size"]) == (
            "go-block",
            "go-key",
            8,
        )
        assert round_command("status")["round_id"] == started["round_id"]
        refused = run_example(go_example, "round", "start", *flags, "--target", server.target)
        assert (
            refused.returncode == 1
            and "ALREADY_EXISTS" in refused.stderr
            and "reason ROUND_ALREADY_RUNNING" in refused.stderr
        )
        stopped = round_command("stop")
    finally:
        stop_round(poc, started["round_id"])
    assert (stopped["round_id"], stopped["state"]) == (started["round_id"], "ROUND_STATE_STOPPED")
    assert (
        poc.GetRoundStatus(poc_pb2.GetRoundStatusRequest(round_id=started["round_id"])).status.state
        == poc_pb2.ROUND_STATE_STOPPED
    )
    unknown = run_example(go_example, "round", "stop", "--round-id", "0" * 32, "--target", server.target)
    assert unknown.returncode == 1 and "NOT_FOUND" in unknown.stderr and "reason ROUND_NOT_FOUND" in unknown.stderr
