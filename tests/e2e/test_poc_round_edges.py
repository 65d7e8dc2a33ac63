"""A round's edges on a real server of its own: a forward is waited on past --engine-call-timeout, and one that
outlasts --engine-stuck-after fails the round but keeps inference out until the engine has returned it, an ended round is forgotten after --poc-retention-s by status and
subscriptions alike, and a SIGTERM sent with a StartRound ends the process cleanly with the round's
artifacts in the callback store. The last test ends the module's server."""

from __future__ import annotations

import signal
import sqlite3
import threading
import time
from collections.abc import Iterator

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from gonka.mlnode.client import InferenceClient, ServerError
from gonka.mlnode.v1 import poc_pb2, poc_pb2_grpc
from server.poc.options import default_callback_store
from tests.support.http_receiver import HttpReceiver
from tests.support.server_process import SERVER_LAYER_FLAGS, ServerProcess, engine_environment, start_server

ENGINE_CALL_TIMEOUT = 1.0
# A forward is engine work, waited on until the engine would count as stuck.
ENGINE_STUCK_AFTER = 2.0
RETENTION = 3.0
# 8 x 4096 tokens: one forward takes 6 s or more on this CPU (the embedded model, eager), several times the
# stuck threshold; the test needs only that it outlasts it.
LONG_FORWARD = dict(seq_len=4096, batch_size=8)
PROMPT_IDS = [9707, 1879, 11, 419]


@pytest.fixture(scope="module")
def edge_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    flags = [
        "--engine-call-timeout",
        str(ENGINE_CALL_TIMEOUT),
        "--engine-stuck-after",
        str(ENGINE_STUCK_AFTER),
        "--poc-retention-s",
        str(RETENTION),
        "--poc-callback-interval-s",
        "0.5",
        "--poc-callback-flush-s",
        "1",
        *SERVER_LAYER_FLAGS,
    ]
    server = start_server(tmp_path_factory.mktemp("edges") / "server.log", flags)
    yield server
    server.stop()


@pytest.fixture
def poc(edge_server: ServerProcess) -> Iterator[poc_pb2_grpc.PocServiceStub]:
    with grpc.insecure_channel(edge_server.target) as channel:
        yield poc_pb2_grpc.PocServiceStub(channel)


@pytest.fixture
def client(edge_server: ServerProcess) -> Iterator[InferenceClient]:
    with InferenceClient(edge_server.target) as inference:
        yield inference


def round_request(
    client: InferenceClient, seq_len: int = 64, batch_size: int = 8, **fields: object
) -> poc_pb2.StartRoundRequest:
    params = poc_pb2.PocParams(model=client.model_info().served_model_name, seq_len=seq_len)
    return poc_pb2.StartRoundRequest(
        block_hash="edge", public_key="edge-key", params=params, batch_size=batch_size, **fields
    )


def inference_health(target: str) -> int:
    with grpc.insecure_channel(target) as channel:
        request = health_pb2.HealthCheckRequest(service="gonka.mlnode.v1.InferenceService")
        return health_pb2_grpc.HealthStub(channel).Check(request, timeout=5).status


def test_a_forward_past_the_stuck_threshold_keeps_inference_out_until_the_engine_returned_it(
    edge_server: ServerProcess, poc: poc_pb2_grpc.PocServiceStub, client: InferenceClient
) -> None:
    round_id = poc.StartRound(round_request(client, **LONG_FORWARD), timeout=30).status.round_id
    started = time.monotonic()
    while (
        status := poc.GetRoundStatus(poc_pb2.GetRoundStatusRequest(round_id=round_id), timeout=5).status
    ).state != poc_pb2.ROUND_STATE_FAILED:
        assert time.monotonic() - started < 30, status
        time.sleep(0.02)
    failed_after = time.monotonic() - started
    # Not at the engine-call timeout: at the stuck threshold, the wait on engine work.
    assert f"within {ENGINE_STUCK_AFTER:g} s" in status.failure, status.failure
    # The round failed on the timeout; the engine still runs its forward: inference stays out.
    with pytest.raises(ServerError) as refused:
        client.generate(token_ids=PROMPT_IDS, max_tokens=1, timeout=30)
    assert (refused.value.code, refused.value.reason) == (grpc.StatusCode.UNAVAILABLE, "POC_IN_PROGRESS")
    assert inference_health(edge_server.target) == health_pb2.HealthCheckResponse.NOT_SERVING
    # Once the engine has returned the forward (and withdrawn the one queued behind it), inference is back.
    while inference_health(edge_server.target) != health_pb2.HealthCheckResponse.SERVING:
        assert time.monotonic() - started < 120, "the gate never opened"
        time.sleep(0.05)
    reopened_after = time.monotonic() - started
    print(
        f"round failed after {failed_after:.2f} s (stuck after {ENGINE_STUCK_AFTER:g} s), inference back after {reopened_after:.2f} s"
    )
    assert len(client.generate(token_ids=PROMPT_IDS, max_tokens=2, timeout=120).first.token_ids) == 2


def test_an_ended_round_is_forgotten_after_the_retention_time(
    poc: poc_pb2_grpc.PocServiceStub, client: InferenceClient
) -> None:
    round_id = poc.StartRound(round_request(client), timeout=30).status.round_id
    poc.StopRound(poc_pb2.StopRoundRequest(round_id=round_id), timeout=30)
    stopped = time.monotonic()
    assert (
        poc.GetRoundStatus(poc_pb2.GetRoundStatusRequest(round_id=round_id)).status.state == poc_pb2.ROUND_STATE_STOPPED
    )
    assert any(
        message.HasField("end")
        for message in poc.SubscribeArtifacts(poc_pb2.SubscribeArtifactsRequest(round_id=round_id))
    )
    time.sleep(max(0.0, RETENTION + 0.5 - (time.monotonic() - stopped)))
    for call, request in (
        (poc.GetRoundStatus, poc_pb2.GetRoundStatusRequest(round_id=round_id)),
        (poc.StopRound, poc_pb2.StopRoundRequest(round_id=round_id)),
        (poc.SubscribeArtifacts, poc_pb2.SubscribeArtifactsRequest(round_id=round_id)),
    ):
        with pytest.raises(grpc.RpcError) as caught:
            result = call(request, timeout=10)
            if not isinstance(result, poc_pb2.GetRoundStatusResponse | poc_pb2.StopRoundResponse):
                list(result)
        assert caught.value.code() == grpc.StatusCode.NOT_FOUND, (call, caught.value)
    with pytest.raises(grpc.RpcError) as latest:
        poc.GetRoundStatus(poc_pb2.GetRoundStatusRequest(), timeout=10)
    assert latest.value.code() == grpc.StatusCode.NOT_FOUND


def test_sigterm_sent_with_start_round_exits_cleanly_with_the_rounds_artifacts_in_the_store(
    edge_server: ServerProcess, client: InferenceClient
) -> None:
    """Ends the module's server. Streams in flight, so that the start-up aborts them, and the signal sent as
    the StartRound goes out: wherever it lands, the process exits 0, every artifact the round published is in
    its store and nothing was dropped."""
    streams = [threading.Thread(target=_stream, args=(edge_server.target, index), daemon=True) for index in range(8)]
    for thread in streams:
        thread.start()
    time.sleep(1.0)
    with HttpReceiver() as receiver, grpc.insecure_channel(edge_server.target) as channel:
        poc = poc_pb2_grpc.PocServiceStub(channel)
        call = poc.StartRound.future(round_request(client, callback_url=receiver.url + "/"), timeout=30)
        edge_server.signal(signal.SIGTERM)
        try:
            answer: poc_pb2.StartRoundResponse | grpc.RpcError = call.result()
        except grpc.RpcError as error:
            answer = error
        assert edge_server.wait(90) == 0, edge_server.log_tail()
    log = edge_server.log_path.read_text()
    assert "Traceback" not in log, edge_server.log_tail()
    if isinstance(answer, grpc.RpcError):
        assert ServerError.from_rpc_error(answer).reason == "SHUTTING_DOWN"
        return
    round_id = answer.status.round_id
    assert f"round {round_id} ended: STOPPED" in log
    with sqlite3.connect(default_callback_store(edge_server.port, engine_environment())) as db:
        stored = db.execute(
            "SELECT COALESCE(SUM(artifacts), 0) FROM callbacks WHERE round_id = ?", (round_id,)
        ).fetchone()[0]
    produced = int(log.split(f"round {round_id} ended: STOPPED, ")[1].split(" nonces")[0])
    assert stored == produced


def _stream(target: str, index: int) -> None:
    try:
        with InferenceClient(target) as inference:
            for _ in inference.stream(
                token_ids=[*PROMPT_IDS, index], max_tokens=4000, ignore_eos=True, temperature=0.0
            ):
                pass
    except ServerError:
        pass  # preempted by the round, or ended by the shutdown
