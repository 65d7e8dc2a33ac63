"""The pull stream mlnode.poc.v1.PoCCallbackStream of a real server, read with the generated Python client as the API
node's consumer reads it (spec section 6): a round started by `pow/init/generate` without `url` streams its
`/generated` callbacks, in the deployed body, under the path the API node's own callback URL would have; acknowledged
ones go, the others come again on the next stream, `resume_after_id` drops what it names and everything before, a new
stream ends the earlier one, and nothing the round produced is missing. Served on the gRPC port when that is
plaintext; with TLS on the gRPC port, on --callback-stream-port, in plaintext."""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import grpc
import httpx
import pytest

from gonka.mlnode.client import InferenceClient
from mlnode.poc.v1 import poc_callback_stream_pb2 as stream_pb2
from mlnode.poc.v1 import poc_callback_stream_pb2_grpc as stream_grpc
from tests.e2e.test_security import client_tls
from tests.support.certificates import CertificateFiles, make_certificates
from tests.support.go_example import GOPATH_GO
from tests.support.http_receiver import HttpReceiver
from tests.support.server_process import SERVER_LAYER_FLAGS, ServerProcess, free_port, start_server

HTTP_TIMEOUT_SECONDS = 60.0
CALL_TIMEOUT_SECONDS = 120.0
# A stream that has sent everything buffered stays open, silent: read to this deadline, it has sent all it had.
DRAIN_SECONDS = 5.0
NODE_ID, NODE_COUNT = 2, 3
BLOCK_HASH, BLOCK_HEIGHT, PUBLIC_KEY, SEQ_LEN = "0x" + "ef" * 32, 91, "pull-stream-key", 64
INIT_PATH = "/api/v1/inference/pow/init/generate"


@dataclass
class StreamNode:
    server: ServerProcess
    api: httpx.Client
    client: InferenceClient
    # Where the pull stream is served (plaintext).
    stream_target: str


def node_of(server: ServerProcess, http_port: int, stream_target: str) -> Iterator[StreamNode]:
    with (
        httpx.Client(base_url=f"http://127.0.0.1:{http_port}", timeout=HTTP_TIMEOUT_SECONDS) as api,
        InferenceClient(server.target, tls=None) as client,
    ):
        yield StreamNode(server, api, client, stream_target)


@pytest.fixture(scope="module")
def plaintext_node(tmp_path_factory: pytest.TempPathFactory, model_dir: Path) -> Iterator[StreamNode]:
    """The gRPC port in plaintext without a token: it serves the stream."""
    http_port = free_port()
    server = start_server(
        tmp_path_factory.mktemp("stream") / "server.log", ["--http-port", str(http_port), *SERVER_LAYER_FLAGS]
    )
    try:
        yield from node_of(server, http_port, server.target)
    finally:
        exit_code = server.stop()
    assert exit_code == 0, f"server exited with {exit_code} on SIGTERM:\n{server.log_tail()}"


def init_generate(node: StreamNode, **extra: str) -> None:
    """A round as the API node starts it when it has no callback URL for the node (`url` omitted, or as given)."""
    body = {
        "block_hash": BLOCK_HASH,
        "block_height": BLOCK_HEIGHT,
        "public_key": PUBLIC_KEY,
        "node_id": NODE_ID,
        "node_count": NODE_COUNT,
        "params": {"model": model_path(node), "seq_len": SEQ_LEN},
        **extra,
    }
    started = node.api.post(INIT_PATH, json=body)
    assert started.status_code == 200, started.text


def model_path(node: StreamNode) -> str:
    return node.client.model_info().model_path


def stop_round(node: StreamNode) -> int:
    """pow/stop; the nonces the round produced."""
    round_id = node.client.poc.round_status(timeout=CALL_TIMEOUT_SECONDS).round_id
    stopped = node.api.post("/api/v1/inference/pow/stop", json={})
    assert stopped.status_code == 200, stopped.text
    return node.client.poc.round_status(round_id, timeout=CALL_TIMEOUT_SECONDS).nonces_produced


def generated_path(model: str) -> str:
    # The API node's callback URL, {poc_callback_url}/v2/poc-batches/{PathEscape(PathEscape(model))} (spec section 5).
    return f"/v2/poc-batches/{quote(quote(model, safe=''), safe='')}/generated"


def drain(stub: stream_grpc.PoCCallbackStreamStub, resume_after_id: str = "") -> list[stream_pb2.Callback]:
    """Everything a new stream sends before it falls silent (the round is over: nothing new comes)."""
    call = stub.StreamCallbacks(
        stream_pb2.StreamCallbacksRequest(resume_after_id=resume_after_id), timeout=DRAIN_SECONDS
    )
    received = []
    with pytest.raises(grpc.RpcError) as ended:
        for callback in call:
            received.append(callback)
    assert ended.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED, ended.value
    return received


def seq_of(callback: stream_pb2.Callback) -> int:
    match = re.fullmatch(r"([0-9a-f]{16})-([1-9][0-9]*)", callback.id)
    assert match, callback.id
    return int(match.group(2))


def check_bodies(callbacks: list[stream_pb2.Callback], model: str) -> dict[int, str]:
    """The deployed /generated bodies of this node's round; their artifacts by nonce."""
    artifacts: dict[int, str] = {}
    for callback in callbacks:
        assert callback.path == generated_path(model)
        body = json.loads(callback.body)
        assert set(body) == {"public_key", "block_hash", "block_height", "node_id", "artifacts", "encoding"}
        assert (body["public_key"], body["block_hash"]) == (PUBLIC_KEY, BLOCK_HASH)
        assert (body["block_height"], body["node_id"]) == (BLOCK_HEIGHT, NODE_ID)
        for artifact in body["artifacts"]:
            assert set(artifact) == {"nonce", "vector_b64"}
            assert artifact["nonce"] % NODE_COUNT == NODE_ID
            assert artifact["nonce"] not in artifacts, "an artifact came twice"
            artifacts[artifact["nonce"]] = artifact["vector_b64"]
    return artifacts


def test_a_round_without_url_streams_its_callbacks_acknowledged_across_reconnects(plaintext_node: StreamNode) -> None:
    node = plaintext_node
    model = model_path(node)
    with grpc.insecure_channel(node.stream_target) as channel:
        stub = stream_grpc.PoCCallbackStreamStub(channel)
        first = stub.StreamCallbacks(stream_pb2.StreamCallbacksRequest())
        init_generate(node)
        try:
            # Callbacks come as the round mines, in seq order from 1.
            live = [next(first) for _ in range(6)]
            assert [seq_of(callback) for callback in live] == [1, 2, 3, 4, 5, 6]
            stub.AckCallbacks(stream_pb2.AckCallbacksRequest(ids=[live[0].id, live[2].id]))
        finally:
            produced = stop_round(node)
        # A new stream ends the earlier one (whatever it had sent before reaches its reader first).
        second = drain(stub)
        with pytest.raises(grpc.RpcError) as ended:
            for _ in first:
                pass
        assert ended.value.code() is grpc.StatusCode.ABORTED
        # Everything but the two acknowledged, in order: the unacknowledged second callback comes again.
        seqs = [seq_of(callback) for callback in second]
        assert seqs == sorted(seqs) and seqs[0] == 2 and 1 not in seqs and 3 not in seqs
        # Nothing the round produced is missing, and nothing came twice.
        streamed = check_bodies([live[0], live[2], *second], model)
        assert len(streamed) == produced
        # An acknowledgement, then a reconnect after an id not acknowledged: that one and all before it count as
        # acknowledged, the rest comes again.
        stub.AckCallbacks(stream_pb2.AckCallbacksRequest(ids=[second[0].id]))
        third = drain(stub, resume_after_id=second[1].id)
        assert [callback.id for callback in third] == [callback.id for callback in second[2:]]
        # Another boot's id (a consumer that outlived an earlier server) drops nothing.
        fourth = drain(stub, resume_after_id="0123456789abcdef-999999")
        assert [callback.id for callback in fourth] == [callback.id for callback in third]
        stub.AckCallbacks(stream_pb2.AckCallbacksRequest(ids=[callback.id for callback in fourth]))
        assert drain(stub) == []


def test_a_round_with_a_url_streams_nothing(plaintext_node: StreamNode) -> None:
    node = plaintext_node
    with grpc.insecure_channel(node.stream_target) as channel:
        stub = stream_grpc.PoCCallbackStreamStub(channel)
        # A receiver that is never there: the durable store keeps the artifacts; the stream has none of them.
        init_generate(node, url=f"http://127.0.0.1:{free_port()}/v2/poc-batches/m")
        try:
            deadline = time.monotonic() + CALL_TIMEOUT_SECONDS
            while node.client.poc.round_status(timeout=CALL_TIMEOUT_SECONDS).nonces_produced == 0:
                assert time.monotonic() < deadline, "the round produced nothing"
                time.sleep(0.1)
        finally:
            produced = stop_round(node)
        assert produced > 0
        assert drain(stub) == []


# The Go consumer, in the shape of the API node's


@pytest.fixture(scope="module")
def go_consumer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """clients/go/cmd/pocstream-consumer, built as `make go-check` builds the Go tree (GOPATH mode, offline)."""
    binary = tmp_path_factory.mktemp("go") / "pocstream-consumer"
    build = subprocess.run(
        [str(GOPATH_GO), "build", "-o", str(binary), "./cmd/pocstream-consumer"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert build.returncode == 0, f"building the Go consumer failed (`make go-setup` installs Go):\n{build.stderr}"
    return binary


def test_the_go_consumer_forwards_every_callback_across_reconnects_after_5xx(
    plaintext_node: StreamNode, go_consumer: Path
) -> None:
    node = plaintext_node
    model = model_path(node)
    # The handler answers 503 twice: the consumer drops the stream, backs off (1 s, then 2 s) and resumes.
    with HttpReceiver(fail_first=2) as receiver:
        consumer = subprocess.Popen(
            [str(go_consumer), "--target", node.stream_target, "--forward", receiver.url, "--idle-exit", "8s"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            init_generate(node)
            try:
                # The path as the API node's handler sees it (unescaped once by its HTTP server).
                handled = f"/v2/poc-batches/{quote(model, safe='')}/generated"
                assert receiver.wait_for(lambda r: len(r.received(handled)) >= 3, CALL_TIMEOUT_SECONDS)
            finally:
                produced = stop_round(node)
            stdout, stderr = consumer.communicate(timeout=CALL_TIMEOUT_SECONDS)
        finally:
            consumer.kill()
        assert consumer.returncode == 0, stderr
        summary = json.loads(stdout)
        bodies = receiver.received(handled)
    assert summary["forward_failures"] == 2 and summary["streams"] >= 3, (summary, stderr)
    assert summary["acknowledged"] == len(bodies)
    nonces = [artifact["nonce"] for body in bodies for artifact in body["artifacts"]]
    assert len(nonces) == len(set(nonces)) == produced
    assert all((body["public_key"], body["node_id"]) == (PUBLIC_KEY, NODE_ID) for body in bodies)
    with grpc.insecure_channel(node.stream_target) as channel:
        assert drain(stream_grpc.PoCCallbackStreamStub(channel)) == []  # every callback acknowledged


# TLS on the gRPC port: the stream on its own plaintext port


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> CertificateFiles:
    return make_certificates(tmp_path_factory.mktemp("pki"))


def test_with_tls_the_stream_is_served_on_the_callback_stream_port_alone(
    tmp_path_factory: pytest.TempPathFactory, model_dir: Path, certificates: CertificateFiles
) -> None:
    http_port, stream_port = free_port(), free_port()
    flags = [
        "--tls-cert",
        str(certificates.server_cert),
        "--tls-key",
        str(certificates.server_key),
        "--http-port",
        str(http_port),
        "--callback-stream-port",
        str(stream_port),
        *SERVER_LAYER_FLAGS,
    ]
    tls = client_tls(certificates, with_certificate=False)
    server = start_server(
        tmp_path_factory.mktemp("tls-stream") / "server.log", flags, credentials=tls.channel_credentials()
    )
    try:
        with (
            httpx.Client(base_url=f"http://127.0.0.1:{http_port}", timeout=HTTP_TIMEOUT_SECONDS) as api,
            InferenceClient(server.target, tls=tls) as client,
            grpc.insecure_channel(f"127.0.0.1:{stream_port}") as channel,
            grpc.secure_channel(server.target, tls.channel_credentials()) as tls_channel,
        ):
            node = StreamNode(server, api, client, f"127.0.0.1:{stream_port}")
            stub = stream_grpc.PoCCallbackStreamStub(channel)
            stream = stub.StreamCallbacks(stream_pb2.StreamCallbacksRequest())
            # An empty url is no url (the API node's omitempty aside).
            init_generate(node, url="")
            try:
                received = next(stream)
                assert seq_of(received) == 1
            finally:
                produced = stop_round(node)
            callbacks = drain(stub)
            assert callbacks[0].id == received.id
            assert len(check_bodies(callbacks, model_path(node))) == produced
            # The TLS port does not serve it.
            with pytest.raises(grpc.RpcError) as refused:
                stream_grpc.PoCCallbackStreamStub(tls_channel).AckCallbacks(
                    stream_pb2.AckCallbacksRequest(), timeout=CALL_TIMEOUT_SECONDS
                )
            assert refused.value.code() is grpc.StatusCode.UNIMPLEMENTED
    finally:
        exit_code = server.stop()
    assert exit_code == 0, f"server exited with {exit_code} on SIGTERM:\n{server.log_tail()}"
