"""The callback store against real servers: a SIGKILL mid-round loses nothing a subscriber saw, two servers
on one host keep to their own stores (and a third cannot take one in use), and poisoned entries hold up
nothing. Servers of the server-layer kind (tests.support.server_process.SERVER_LAYER_FLAGS), which start
fastest."""

from __future__ import annotations

import base64
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest

from gonka.mlnode.v1 import inference_pb2 as pb
from gonka.mlnode.v1 import inference_pb2_grpc, poc_pb2, poc_pb2_grpc
from server.poc.delivery.callback_store import CallbackStore
from server.poc.delivery.store_lock import StoreLock
from server.poc.delivery.validated import validated_url
from server.poc.options import default_callback_store
from tests.support.http_receiver import HttpReceiver
from tests.support.server_process import (
    REPO_ROOT,
    SERVER_LAYER_FLAGS,
    ServerProcess,
    engine_environment,
    free_port,
    start_server,
)

K = 12
FLAGS = ["--poc-callback-interval-s", "0.5", "--poc-callback-flush-s", "1", *SERVER_LAYER_FLAGS]
# Artifacts a subscriber reads before the kill: several callback intervals' worth, so some were sent (and
# failed) and some not yet when it comes.
SEEN_BEFORE_KILL = 400
DELIVERY_TIMEOUT = 90.0


def store_of(port: int) -> Path:
    return default_callback_store(port, engine_environment())


def pending_artifacts(store: Path) -> int:
    with sqlite3.connect(store) as db:
        return db.execute("SELECT COALESCE(SUM(artifacts), 0) FROM callbacks WHERE state = 'pending'").fetchone()[0]


def delivered(receiver: HttpReceiver, public_key: str) -> dict[int, str]:
    return {
        artifact["nonce"]: artifact["vector_b64"]
        for body in receiver.received("/generated")
        if body["public_key"] == public_key
        for artifact in body["artifacts"]
    }


def mine_until_seen_then_kill(
    server: ServerProcess, public_key: str, callback_url: str
) -> tuple[dict[int, str], list[int]]:
    """Starts a round, reads its artifacts as a subscriber, and SIGKILLs the server while the round mines, once
    SEEN_BEFORE_KILL artifacts were read; returns every artifact the subscriber saw (nonce -> vector_b64) and the
    engine processes the server had started."""
    seen: dict[int, str] = {}
    engine_processes: list[int] = []
    with grpc.insecure_channel(server.target) as channel:
        model = (
            inference_pb2_grpc.InferenceServiceStub(channel).GetModelInfo(pb.GetModelInfoRequest()).served_model_name
        )
        poc = poc_pb2_grpc.PocServiceStub(channel)
        started = poc.StartRound(
            poc_pb2.StartRoundRequest(
                block_hash="kill-block",
                block_height=5,
                public_key=public_key,
                params=poc_pb2.PocParams(model=model, seq_len=64),
                batch_size=8,
                callback_url=callback_url,
            ),
            timeout=60,
        ).status
        try:
            for message in poc.SubscribeArtifacts(
                poc_pb2.SubscribeArtifactsRequest(round_id=started.round_id), timeout=120
            ):
                assert not message.HasField("lost") and not message.HasField("end"), message
                batch = message.batch
                for index, nonce in enumerate(batch.nonces):
                    seen[nonce] = base64.b64encode(batch.vectors[2 * K * index : 2 * K * (index + 1)]).decode()
                if len(seen) >= SEEN_BEFORE_KILL:
                    engine_processes = server.kill_alone()  # the round is mining: the next batch is in the engine
                    break
        except grpc.RpcError:
            pass  # the stream cut by the kill
    return seen, engine_processes


def process_alive(pid: int) -> bool:
    """Running, or exited but not yet reaped (a zombie is gone for every purpose here)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (OSError, IndexError):
        return False


def wait_for(condition: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


@pytest.mark.usefixtures("several_servers")
def test_sigkill_mid_round_loses_nothing_a_subscriber_saw_and_two_servers_keep_to_their_own_stores(
    tmp_path: Path,
) -> None:
    receiver_port = free_port()  # nothing listens there while the rounds run
    callback_url = f"http://127.0.0.1:{receiver_port}"
    ports = {"first": free_port(), "second": free_port()}
    with ThreadPoolExecutor(2) as pool:  # two servers on one host, started side by side
        servers = dict(
            zip(ports, pool.map(lambda name: start_server(tmp_path / f"{name}.log", FLAGS, port=ports[name]), ports))
        )
    restarted: list[ServerProcess] = []
    try:
        # A third server pointed at a store in use is refused before it loads anything.
        third = subprocess.run(
            [
                sys.executable,
                "-m",
                "server",
                "--port",
                str(free_port()),
                "--callback-store",
                str(store_of(ports["second"])),
            ],
            cwd=REPO_ROOT,
            env=engine_environment(),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert third.returncode == 2 and "in use by another server" in third.stderr, third.stderr

        with ThreadPoolExecutor(2) as pool:
            killed = dict(
                zip(ports, pool.map(lambda name: mine_until_seen_then_kill(servers[name], name, callback_url), ports))
            )
        seen = {name: artifacts for name, (artifacts, _) in killed.items()}
        for name in ports:
            assert servers[name].process.returncode == -signal.SIGKILL
            assert len(seen[name]) >= SEEN_BEFORE_KILL
            assert pending_artifacts(store_of(ports[name])) >= len(seen[name])
            # vLLM's engine processes end with the killed server (engine_ext.process_lifetime): their memory is free
            # for the server started next.
            engine_processes = killed[name][1]
            assert engine_processes and wait_for(lambda: not any(map(process_alive, engine_processes)), 30.0), (  # noqa: B023 called before the loop moves on
                engine_processes
            )

        with HttpReceiver(port=receiver_port) as receiver:
            # Only the second server comes back: it delivers its own entries, and never the first one's.
            restarted.append(start_server(tmp_path / "second-again.log", FLAGS, port=ports["second"]))
            assert wait_for(
                lambda: seen["second"].items() <= delivered(receiver, "second").items(), DELIVERY_TIMEOUT
            ), restarted[-1].log_tail()
            time.sleep(2.0)  # several callback intervals more
            assert delivered(receiver, "first") == {}
            assert pending_artifacts(store_of(ports["first"])) >= len(seen["first"])

            restarted.append(start_server(tmp_path / "first-again.log", FLAGS, port=ports["first"]))
            assert wait_for(lambda: seen["first"].items() <= delivered(receiver, "first").items(), DELIVERY_TIMEOUT), (
                restarted[-1].log_tail()
            )
            keys = receiver.keys("/generated")
        assert keys and all(keys), "every callback carries an Idempotency-Key"
    finally:
        for server in [*servers.values(), *restarted]:
            server.stop()
    assert [server.process.returncode for server in restarted] == [0, 0]


def test_poisoned_store_entries_hold_up_nothing(tmp_path: Path) -> None:
    """Entries no client could have sent (a URL that no longer parses, a torn body) before good ones, in a store
    the server finds at its start: every good entry is delivered, each poisoned one given up with a log line."""
    receiver_port = free_port()
    url = f"http://127.0.0.1:{receiver_port}"
    store_path = tmp_path / "callbacks.sqlite3"
    store = CallbackStore(StoreLock.claim(store_path))
    store.append("http://[::1/generated", {"artifacts": [{"nonce": -1, "vector_b64": "AAA="}]}, "old-round", 1)
    torn = store.append(f"{url}/generated", {"artifacts": []}, "earlier-round", 0)
    good = 0
    for batch in range(40):
        artifacts = [
            {"nonce": batch * 50 + i, "vector_b64": base64.b64encode(bytes(2 * K)).decode()} for i in range(50)
        ]
        body = {
            "public_key": "poisoned",
            "block_hash": "b",
            "block_height": 1,
            "node_id": 0,
            "artifacts": artifacts,
            "encoding": {"dtype": "f16", "k_dim": K, "endian": "le"},
        }
        store.append(f"{url}/generated", body, "earlier-round", len(artifacts))
        good += len(artifacts)
    store.append(validated_url(url), {"request_id": "after-the-poison"}, None, 0)
    store.close()
    with sqlite3.connect(store_path) as db:
        db.execute('UPDATE callbacks SET body = \'{"artifacts": [{"nonce": 7, "vec\' WHERE id = ?', (torn,))

    with HttpReceiver(port=receiver_port) as receiver:
        server = start_server(tmp_path / "server.log", [*FLAGS, "--callback-store", str(store_path)])
        try:
            assert wait_for(
                lambda: len(delivered(receiver, "poisoned")) == good and receiver.received("/validated"), 60
            ), server.log_tail()
        finally:
            assert server.stop() == 0
    log = (tmp_path / "server.log").read_text()
    assert "given up (unsendable)" in log and "Invalid IPv6 URL" in log
    assert "the stored body is unreadable" in log
    with sqlite3.connect(store_path) as db:
        states = dict(db.execute("SELECT state, COUNT(*) FROM callbacks GROUP BY state").fetchall())
    assert states == {"given_up": 2, "delivered": 41}
