"""SIGTERM during a mining round whose callback receiver is down: subscribers get a final message, the
process exits 0 with every artifact of the round in its callback store, and the next start on the same
port delivers them all. On the way, a subscriber that comes late to a small buffer is told exactly what it
lost."""

from __future__ import annotations

import base64
import signal
import sqlite3
import threading
from pathlib import Path

import grpc

from gonka.mlnode.v1 import inference_pb2 as pb
from gonka.mlnode.v1 import inference_pb2_grpc, poc_pb2, poc_pb2_grpc
from server.poc.options import default_callback_store
from tests.support.http_receiver import HttpReceiver
from tests.support.server_process import SERVER_LAYER_FLAGS, engine_environment, free_port, start_server

K = 12


def pending_artifacts(store: Path) -> int:
    with sqlite3.connect(store) as db:
        return db.execute("SELECT COALESCE(SUM(artifacts), 0) FROM callbacks WHERE state = 'pending'").fetchone()[0]


def test_sigterm_during_a_round_keeps_everything_and_the_next_start_delivers(tmp_path: Path, model_dir: Path) -> None:
    receiver_port = free_port()  # nothing listens there during the first run
    port = free_port()
    store = default_callback_store(port, engine_environment())
    # A buffer of 8 batches: a late subscriber is told exactly what it lost.
    flags = [
        "--poc-callback-flush-s",
        "1",
        "--poc-callback-interval-s",
        "0.5",
        "--poc-buffer-artifacts",
        "64",
        *SERVER_LAYER_FLAGS,
    ]
    server = start_server(tmp_path / "first.log", flags, port=port)
    produced: dict[int, str] = {}
    missed: list[int] = []  # artifacts the reader itself came too late for (a stalled test process)
    ends: list[poc_pb2.SubscriptionEnd] = []
    try:
        with grpc.insecure_channel(server.target) as channel:
            model = (
                inference_pb2_grpc.InferenceServiceStub(channel)
                .GetModelInfo(pb.GetModelInfoRequest())
                .served_model_name
            )
            poc = poc_pb2_grpc.PocServiceStub(channel)
            poc.StartRound(
                poc_pb2.StartRoundRequest(
                    block_hash="spool-block",
                    block_height=3,
                    public_key="spool-key",
                    params=poc_pb2.PocParams(model=model, seq_len=64),
                    batch_size=8,
                    callback_url=f"http://127.0.0.1:{receiver_port}",
                )
            )
            enough = threading.Event()

            def subscribe() -> None:
                for message in poc.SubscribeArtifacts(poc_pb2.SubscribeArtifactsRequest()):
                    if message.HasField("batch"):
                        for index, nonce in enumerate(message.batch.nonces):
                            produced[nonce] = base64.b64encode(
                                message.batch.vectors[2 * K * index : 2 * K * (index + 1)]
                            ).decode()
                        if len(produced) >= 160:
                            enough.set()
                    elif message.HasField("lost"):
                        missed.append(message.lost.artifacts)
                    elif message.HasField("end"):
                        ends.append(message.end)

            reader = threading.Thread(target=subscribe)
            reader.start()
            assert enough.wait(120), "the round produced too little"
            late = next(iter(poc.SubscribeArtifacts(poc_pb2.SubscribeArtifactsRequest(after_sequence=0))))
            assert late.HasField("lost") and late.lost.first_missing_sequence == 1
            assert late.lost.artifacts == late.lost.batches * 8 and late.lost.batches >= 20 - 8
            server.signal(signal.SIGTERM)
            reader.join(60)
            assert server.wait(90) == 0, server.log_tail()
    finally:
        server.stop()
    assert [end.reason for end in ends] == [poc_pb2.SUBSCRIPTION_END_REASON_SERVER_SHUTTING_DOWN]
    round_artifacts = ends[0].last_sequence * 8
    assert len(produced) + sum(missed) == round_artifacts
    assert pending_artifacts(store) == round_artifacts

    with HttpReceiver(port=receiver_port) as receiver:
        second = start_server(tmp_path / "second.log", flags, port=port)
        try:

            def delivered(r: HttpReceiver) -> dict[int, str]:
                return {a["nonce"]: a["vector_b64"] for body in r.received("/generated") for a in body["artifacts"]}

            assert receiver.wait_for(lambda r: len(delivered(r)) >= round_artifacts, timeout=60), second.log_tail()
        finally:
            assert second.stop() == 0
    assert len(delivered(receiver)) == round_artifacts
    assert {nonce: vector for nonce, vector in delivered(receiver).items() if nonce in produced} == produced
    assert pending_artifacts(store) == 0
