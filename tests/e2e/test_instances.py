"""One server, two engine instances (--instances 2) of the embedded model, each on one core of its own: routing,
the per-instance nonce groups, artifacts equal to one instance's, validation spread over both, the gate across
both, both instances' metrics, and a dead instance beside a living one.

One two-instance server serves the whole module (its start is the cost: two engines one after the other), with the
fast flags of tests about the server around the engine (SERVER_LAYER_FLAGS: eager PoC forward) and 1 GiB of KV cache
per instance. The tests run in file order and the last one kills an instance's engine; the single-instance artifacts
come from the suite's shared server (compiled PoC forward: the two forwards agree within L2 0.0066).
"""

from __future__ import annotations

import os
import signal
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2
from prometheus_client.parser import text_string_to_metric_families

from gonka.mlnode.client import InferenceClient, ServerError, build_request, inference_item
from gonka.mlnode.v1 import inference_pb2 as pb
from gonka.mlnode.v1 import poc_pb2, poc_pb2_grpc
from tests.support.server_process import (
    SERVER_LAYER_FLAGS,
    ServerProcess,
    engine_environment,
    free_port,
    start_server,
    startup_timeout,
)

PROMPT_IDS = [9707, 1879, 11, 419, 374, 264, 1273]
LONG = dict(token_ids=PROMPT_IDS, max_tokens=4000, ignore_eos=True, temperature=0.0)
INFERENCE = "gonka.mlnode.v1.InferenceService"
# A host-wide setting the way an operator sets it for every engine (NVLink multicast off): every instance must get it.
HOST_SETTING = ("NCCL_NVLS_ENABLE", "0")
BIND = "VLLM_CPU_OMP_THREADS_BIND"
NODE_ID, NODE_COUNT = 1, 3
SEQ_LEN, BATCH = 16, 4
L2_BOUND = 0.02
SERVING, NOT_SERVING = health_pb2.HealthCheckResponse.SERVING, health_pb2.HealthCheckResponse.NOT_SERVING


@pytest.fixture(scope="module")
def instances_server(tmp_path_factory: pytest.TempPathFactory, model_dir: Path) -> Iterator[tuple[ServerProcess, str]]:
    env = engine_environment(kv_cache_gib=1)
    env[HOST_SETTING[0]] = HOST_SETTING[1]
    env.pop(BIND, None)
    metrics_port = free_port()
    flags = ["--instances", "2", "--metrics-port", str(metrics_port), *SERVER_LAYER_FLAGS]
    # Two engines start one after the other.
    server = start_server(
        tmp_path_factory.mktemp("instances") / "server.log", flags, env=env, timeout=2 * startup_timeout()
    )
    yield server, f"http://127.0.0.1:{metrics_port}/metrics"
    exit_code = server.stop()
    assert exit_code == 0, f"server exited with {exit_code} on SIGTERM:\n{server.log_tail()}"


@pytest.fixture(scope="module")
def target(instances_server: tuple[ServerProcess, str]) -> str:
    return instances_server[0].target


@pytest.fixture(scope="module")
def two(instances_server: tuple[ServerProcess, str]) -> Iterator[InferenceClient]:
    with InferenceClient(instances_server[0].target) as client:
        yield client


@pytest.fixture(scope="module")
def model(two: InferenceClient) -> str:
    return two.model_info().served_model_name


@pytest.fixture(scope="module")
def poc(instances_server: tuple[ServerProcess, str]) -> Iterator[poc_pb2_grpc.PocServiceStub]:
    with grpc.insecure_channel(instances_server[0].target) as channel:
        yield poc_pb2_grpc.PocServiceStub(channel)


def scrape(url: str) -> dict[tuple[str, frozenset], float]:
    with urllib.request.urlopen(url, timeout=30) as response:
        text = response.read().decode()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def has(samples: dict[tuple[str, frozenset], float], name: str, **labels: str) -> bool:
    return any(n == name and set(labels.items()) <= sample_labels for n, sample_labels in samples)


def value(samples: dict[tuple[str, frozenset], float], name: str, **labels: str) -> float:
    return sum(v for (n, sample_labels), v in samples.items() if n == name and set(labels.items()) <= sample_labels)


class HeldStreams:
    """Long greedy streams running in threads until each ends; what each received and how it ended."""

    def __init__(self, target: str, count: int) -> None:
        self.received = dict.fromkeys(range(count), 0)
        self.ended: dict[int, ServerError | None] = {}
        self._threads = [
            threading.Thread(target=self._run, args=(target, index), daemon=True) for index in range(count)
        ]
        for thread in self._threads:
            thread.start()

    def _run(self, target: str, index: int) -> None:
        with InferenceClient(target) as client:
            try:
                for _ in client.stream(**LONG, request_id=f"held-{index}"):
                    self.received[index] += 1
                self.ended[index] = None
            except ServerError as error:
                self.ended[index] = error

    def wait_streaming(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while not all(self.received.values()):
            assert time.monotonic() < deadline, f"streams not started: {self.received}"
            time.sleep(0.05)

    def join(self, timeout: float = 120) -> None:
        for thread in self._threads:
            thread.join(timeout)
        assert len(self.ended) == len(self._threads), "a stream did not end"


def test_each_instance_runs_on_its_own_cores_with_the_servers_environment(two: InferenceClient) -> None:
    status = two.server_status(include_engine_processes=True)
    assert [(entry.index, entry.state, entry.device_slice) for entry in status.instances] == [
        (0, pb.InstanceStatus.STATE_SERVING, f"{BIND}=0"),
        (1, pb.InstanceStatus.STATE_SERVING, f"{BIND}=1"),
    ]
    processes = {(process.instance, process.role) for process in status.engine_processes}
    assert processes == {
        (i, role) for i in (0, 1) for role in (pb.EngineProcess.ROLE_ENGINE_CORE, pb.EngineProcess.ROLE_WORKER)
    }
    for process in status.engine_processes:
        # The server's environment plus the instance's slice: the host's own settings reach every engine.
        assert dict(process.environment) == {BIND: str(process.instance), HOST_SETTING[0]: HOST_SETTING[1]}
    for index in (0, 1):
        assert two.health(f"{INFERENCE}/instance-{index}") == SERVING


def test_every_instances_vllm_metrics_are_scraped_after_both_started(instances_server, two: InferenceClient) -> None:
    url = instances_server[1]
    before = scrape(url)
    # vLLM's stat logger of the second engine unregisters every vllm: collector it finds: the first's too, unless
    # the server kept each engine's apart.
    for index in ("0", "1"):
        assert has(before, "vllm:num_requests_running", instance=index), index
    # With both idle, a request goes to instance 0 (ties to the lowest index): its counters move, the other's not.
    assert two.generate(token_ids=PROMPT_IDS, max_tokens=5, ignore_eos=True).first.finish_reason == "length"
    alone = scrape(url)
    assert [delta(before, alone, "vllm:generation_tokens_total", instance=index) for index in ("0", "1")] == [5, 0]
    streams = HeldStreams(instances_server[0].target, 2)  # then one on each instance
    streams.wait_streaming()
    during = scrape(url)
    for index in ("0", "1"):
        assert value(during, "mlnode_instance_routed_requests", instance=index) == 1
        assert value(during, "mlnode_instance_state", instance=index, state="serving") == 1
    for index in (0, 1):
        two.abort(f"held-{index}")
    streams.join()
    after = scrape(url)
    assert delta(alone, after, "vllm:generation_tokens_total", instance="1") > 0


def delta(before: dict, after: dict, name: str, **labels: str) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


def test_inference_goes_to_the_least_loaded_instance_and_abort_finds_it_there(
    target: str, two: InferenceClient
) -> None:
    streams = HeldStreams(target, 2)
    streams.wait_streaming()
    status = two.server_status()
    assert [(entry.routed_requests, entry.running_requests) for entry in status.instances] == [(1, 1), (1, 1)]
    assert status.running_requests == 2 and status.active_streams == 2
    # A third request goes to an instance with one request, and ends.
    assert two.generate(token_ids=PROMPT_IDS, max_tokens=3).first.finish_reason == "length"
    for index in (1, 0):
        two.abort(f"held-{index}")
    streams.join()
    assert streams.ended == {0: None, 1: None}
    assert [entry.routed_requests for entry in two.server_status().instances] == [0, 0]


def test_replays_spread_over_the_instances_pass(two: InferenceClient) -> None:
    items = []
    for seed in range(4):
        request = build_request(token_ids=PROMPT_IDS, max_tokens=12, temperature=0.99, seed=seed, top_logprobs=5)
        recorded = two.generate(
            build_request(
                token_ids=PROMPT_IDS,
                max_tokens=12,
                temperature=0.99,
                seed=seed,
                top_logprobs=5,
                chain_top_logprobs=True,
            )
        ).first
        items.append(inference_item(request, recorded.token_ids, recorded.logprobs.chain_top, threshold=0.94))
    verdicts = two.validate_inference(items, timeout=300)
    assert sorted(verdict.index for verdict in verdicts) == [0, 1, 2, 3]
    assert all(verdict.verdict.passed for verdict in verdicts), verdicts


def test_a_group_field_is_refused_when_the_server_numbers_the_groups(poc, model: str) -> None:
    with pytest.raises(grpc.RpcError) as refused:
        poc.StartRound(round_request(model, group_id=1, group_count=2))
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert refused.value.details().startswith("group_id: is set by this server, which runs 2 engine instances")


def round_request(model: str, **fields) -> poc_pb2.StartRoundRequest:
    return poc_pb2.StartRoundRequest(
        block_hash="instances-block",
        public_key="instances-key",
        node_id=NODE_ID,
        node_count=NODE_COUNT,
        batch_size=BATCH,
        params=poc_pb2.PocParams(model=model, seq_len=SEQ_LEN),
        **fields,
    )


@pytest.fixture(scope="module")
def mined(instances_server, two: InferenceClient, poc, model: str) -> dict:
    """One round on both instances, started while a stream runs on each; what was seen while it ran."""
    target = instances_server[0].target
    streams = HeldStreams(target, 2)
    streams.wait_streaming()
    started = poc.StartRound(round_request(model)).status
    streams.join()
    seen = {
        "preempted": dict(streams.ended),
        "started": started,
        "gate_closed": two.server_status().inference_gate_closed,
    }
    with pytest.raises(ServerError) as refused:
        two.generate(token_ids=PROMPT_IDS, max_tokens=2)
    seen["refused"] = refused.value
    seen["health"] = {
        service: two.health(service) for service in (INFERENCE, f"{INFERENCE}/instance-0", f"{INFERENCE}/instance-1")
    }
    deadline = time.monotonic() + 120
    while (
        min(group.nonces_produced for group in poc.GetRoundStatus(poc_pb2.GetRoundStatusRequest()).status.groups) < 40
    ):
        assert time.monotonic() < deadline
        time.sleep(0.2)
    seen["stopped"] = poc.StopRound(poc_pb2.StopRoundRequest()).status
    seen["batches"] = [
        m.batch
        for m in poc.SubscribeArtifacts(poc_pb2.SubscribeArtifactsRequest(round_id=started.round_id))
        if m.HasField("batch")
    ]
    return seen


def test_one_round_holds_inference_off_every_instance_and_hands_both_back(
    mined: dict, target: str, two: InferenceClient
) -> None:
    for error in mined["preempted"].values():
        assert error is not None and (error.code, error.reason) == (grpc.StatusCode.UNAVAILABLE, "POC_PREEMPTED")
    assert mined["started"].preempted_streams == 2
    assert mined["gate_closed"] and mined["refused"].reason == "POC_IN_PROGRESS"
    assert mined["health"][INFERENCE] == NOT_SERVING
    # Each instance's own health is its engine's: both engines serve (PoC) during the round.
    assert mined["health"][f"{INFERENCE}/instance-0"] == mined["health"][f"{INFERENCE}/instance-1"] == SERVING
    status = two.server_status()
    assert not status.inference_gate_closed and two.health(INFERENCE) == SERVING
    streams = HeldStreams(target, 2)
    streams.wait_streaming()
    assert [entry.running_requests for entry in two.server_status().instances] == [1, 1]
    for index in (0, 1):
        two.abort(f"held-{index}")
    streams.join()


def test_each_instance_mines_its_own_group_of_the_frozen_formula(mined: dict) -> None:
    stopped, batches = mined["stopped"], mined["batches"]
    assert stopped.state == poc_pb2.ROUND_STATE_STOPPED
    assert (stopped.parameters.group_id, stopped.parameters.group_count) == (0, 2)
    assert [(group.group_id, group.instance, group.state) for group in stopped.groups] == [
        (0, 0, poc_pb2.ROUND_STATE_STOPPED),
        (1, 1, poc_pb2.ROUND_STATE_STOPPED),
    ]
    for group in stopped.groups:
        mined_nonces = [n for batch in batches if batch.group_id == group.group_id for n in batch.nonces]
        assert {batch.instance for batch in batches if batch.group_id == group.group_id} == {group.instance}
        # node_id + group_id*node_count + x*(n_groups*node_count), x = 0, 1, 2, ... in order.
        stride = 2 * NODE_COUNT
        assert mined_nonces == [NODE_ID + group.group_id * NODE_COUNT + x * stride for x in range(len(mined_nonces))]
        assert len(mined_nonces) == group.nonces_produced >= 40
    everything = [n for batch in batches for n in batch.nonces]
    assert len(set(everything)) == len(everything) == stopped.nonces_produced


def vectors_by_nonce(batches) -> dict[int, np.ndarray]:
    found = {}
    for batch in batches:
        rows = np.frombuffer(batch.vectors, dtype="<f2").reshape(len(batch.nonces), batch.k_dim).astype(np.float32)
        found.update(zip(batch.nonces, rows))
    return found


def test_the_rounds_artifacts_equal_one_instances_and_validate_on_both(
    mined: dict, two: InferenceClient, client: InferenceClient, model: str
) -> None:
    round_vectors = vectors_by_nonce(mined["batches"])
    # The first nonces of each group, and the single-instance server's artifacts of the same nonces.
    nonces = [n for group_id in (0, 1) for n in next(b for b in mined["batches"] if b.group_id == group_id).nonces]
    single = vectors_by_nonce(client.poc.compute_artifacts("instances-block", "instances-key", model, SEQ_LEN, nonces))
    distances = [float(np.linalg.norm(round_vectors[n] - single[n])) for n in nonces]
    assert max(distances) <= L2_BOUND, distances
    # ComputeArtifacts on both instances: the list's order, batch after batch, and the round's very values.
    listed = sorted(round_vectors)[:40]
    computed = list(
        two.poc.compute_artifacts("instances-block", "instances-key", model, SEQ_LEN, listed, batch_size=BATCH)
    )
    assert [n for batch in computed for n in batch.nonces] == listed
    assert {batch.instance for batch in computed} == {0, 1}
    assert all(np.array_equal(vectors_by_nonce(computed)[n], round_vectors[n]) for n in listed)
    claims = [(n, round_vectors[n].astype("<f2").tobytes()) for n in listed]
    responses = list(
        two.poc.validate_poc_artifacts(
            claims=claims,
            block_hash="instances-block",
            public_key="instances-key",
            model=model,
            seq_len=SEQ_LEN,
            batch_size=BATCH,
            dist_threshold=0.02,
            p_mismatch=0.1,
            p_value_threshold=0.05,
        )
    )
    progress = [n for response in responses if response.HasField("progress") for n in response.progress.nonces]
    assert progress == listed
    summary = responses[-1].summary
    assert (summary.n_total, summary.n_mismatch, summary.fraud_detected) == (len(listed), 0, False)


def test_a_dead_instance_ends_its_streams_and_the_other_serves_on(
    instances_server, two: InferenceClient, poc, model: str
) -> None:
    server, url = instances_server
    streams = HeldStreams(server.target, 2)
    streams.wait_streaming()
    status = two.server_status(include_engine_processes=True)
    core = next(
        p.pid for p in status.engine_processes if p.instance == 1 and p.role == pb.EngineProcess.ROLE_ENGINE_CORE
    )
    os.kill(core, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while not streams.ended:
        assert time.monotonic() < deadline, "no stream ended with the engine"
        time.sleep(0.05)
    # One stream ran on each instance: instance 1's ended with its engine, named; instance 0's runs on.
    [died] = streams.ended.values()
    [survivor] = {0, 1} - set(streams.ended)
    assert streams.received[survivor] > 0
    assert (died.code, died.reason) == (grpc.StatusCode.UNAVAILABLE, "ENGINE_DEAD")
    assert "the engine of instance 1 has died; the server's other instances serve on" in str(died)
    deadline = time.monotonic() + 10
    while two.health(f"{INFERENCE}/instance-1") != NOT_SERVING:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert (
        two.health(f"{INFERENCE}/instance-0") == SERVING
        and two.health(INFERENCE) == SERVING
        and two.health("") == SERVING
    )
    entries = two.server_status().instances
    assert [(entry.index, entry.state) for entry in entries] == [
        (0, pb.InstanceStatus.STATE_SERVING),
        (1, pb.InstanceStatus.STATE_DEAD),
    ]
    assert entries[1].engine_problem == "the engine has died"
    samples = scrape(url)
    assert value(samples, "mlnode_instance_state", instance="1", state="dead") == 1
    assert value(samples, "mlnode_instance_state", instance="0", state="serving") == 1
    for _ in range(3):
        assert two.generate(token_ids=PROMPT_IDS, max_tokens=3).first.finish_reason == "length"
    two.abort(f"held-{survivor}")
    streams.join()
    assert streams.ended[survivor] is None
    # The next round runs on the instance that serves: one group of one.
    started = poc.StartRound(round_request(model)).status
    stopped = poc.StopRound(poc_pb2.StopRoundRequest(round_id=started.round_id)).status
    assert [(group.group_id, group.instance) for group in stopped.groups] == [
        (0, 0)
    ] and stopped.parameters.group_count == 1
