"""The Prometheus endpoint of a server started with --metrics-port, scraped over HTTP.

vLLM's engine metrics count requests on both output paths alike (token streams, which bypass vLLM's
output processor, and vLLM's generate()); per-RPC metrics count by method, code and ErrorInfo
reason; a PoC round shows up as rounds and nonces, its callbacks as entries delivered and given up. Every check compares two scrapes around what the
test did, so the tests need no order among themselves. (Without --metrics-port there is no endpoint:
tests/unit/test_metrics_options.py.)
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gonka.mlnode.client import InferenceClient, ServerError
from gonka.mlnode.v1 import poc_pb2, poc_pb2_grpc
from tests.support.http_receiver import HttpReceiver
from tests.support.server_process import SERVER_LAYER_FLAGS, ServerProcess, free_port, start_server

PROMPT_IDS = [9707, 1879, 11, 419, 374, 264, 1273]
MAX_TOKENS = 4
# Exactly MAX_TOKENS tokens each, one per engine step.
FIXED_LENGTH = dict(max_tokens=MAX_TOKENS, ignore_eos=True, temperature=0.0)
GENERATE = "Generate"
INFERENCE = "gonka.mlnode.v1.InferenceService"
POC = "gonka.mlnode.v1.PocService"
SCRAPE_TIMEOUT_SECONDS = 30
ROUND_TIMEOUT_SECONDS = 120


class Scrape:
    """One exposition of the endpoint, parsed by prometheus_client's own parser."""

    def __init__(self, text: str) -> None:
        self.samples = [sample for family in text_string_to_metric_families(text) for sample in family.samples]

    def value(self, name: str, **labels: str) -> float:
        """The sum of the samples named `name` whose labels include `labels` (0 when there are none)."""
        return sum(s.value for s in self.samples if s.name == name and labels.items() <= s.labels.items())

    def has(self, name: str) -> bool:
        return any(sample.name == name for sample in self.samples)


@pytest.fixture(scope="module")
def metrics_server(tmp_path_factory: pytest.TempPathFactory, model_dir: Path) -> Iterator[tuple[ServerProcess, str]]:
    metrics_port = free_port()
    server = start_server(
        tmp_path_factory.mktemp("metrics") / "server.log", ["--metrics-port", str(metrics_port), *SERVER_LAYER_FLAGS]
    )
    yield server, f"http://127.0.0.1:{metrics_port}"
    exit_code = server.stop()
    assert exit_code == 0, f"server exited with {exit_code} on SIGTERM:\n{server.log_tail()}"


@pytest.fixture(scope="module")
def endpoint(metrics_server: tuple[ServerProcess, str]) -> str:
    return metrics_server[1]


@pytest.fixture(scope="module")
def client(metrics_server: tuple[ServerProcess, str]) -> Iterator[InferenceClient]:
    with InferenceClient(metrics_server[0].target) as blocking_client:
        yield blocking_client


@pytest.fixture(scope="module")
def model(client: InferenceClient) -> str:
    return client.model_info().served_model_name


def scrape(endpoint: str) -> Scrape:
    with urllib.request.urlopen(f"{endpoint}/metrics", timeout=SCRAPE_TIMEOUT_SECONDS) as response:
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        return Scrape(response.read().decode())


def engine_counts(scrape: Scrape, model: str) -> dict[str, float]:
    """vLLM's own request metrics, as its OpenAI server exports them."""
    labels = {"model_name": model, "engine": "0"}
    names = (
        "vllm:request_success_total",
        "vllm:time_to_first_token_seconds_count",
        "vllm:inter_token_latency_seconds_count",
        "vllm:e2e_request_latency_seconds_count",
        "vllm:request_generation_tokens_count",
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
    )
    return {name.removeprefix("vllm:"): scrape.value(name, **labels) for name in names}


def growth(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {name: after[name] - before[name] for name in before}


@pytest.mark.parametrize("path", ["token streams", "vLLM's generate"])
def test_completed_requests_count_in_vllms_metrics_on_both_paths(
    client: InferenceClient, endpoint: str, model: str, path: str
) -> None:
    # Text-free token-id streams take the token-stream path; asking for text takes vLLM's generate().
    requests = 3
    wants_text = path == "vLLM's generate"
    before = engine_counts(scrape(endpoint), model)
    prompt_tokens = 0
    for index in range(requests):
        if wants_text:
            generation = client.generate(prompt=f"Metrics, take {index}:", include_text=True, **FIXED_LENGTH)
        else:
            generation = client.generate(token_ids=PROMPT_IDS, **FIXED_LENGTH)
        assert len(generation.first.token_ids) == MAX_TOKENS and generation.first.finish_reason == "length"
        prompt_tokens += generation.first.usage.prompt_tokens
    grew = growth(before, engine_counts(scrape(endpoint), model))

    assert grew == {
        "request_success_total": requests,
        "time_to_first_token_seconds_count": requests,
        # One latency for each token after the first.
        "inter_token_latency_seconds_count": requests * (MAX_TOKENS - 1),
        "e2e_request_latency_seconds_count": requests,
        "request_generation_tokens_count": requests,
        "prompt_tokens_total": prompt_tokens,
        "generation_tokens_total": requests * MAX_TOKENS,
    }


def test_the_engines_scheduler_gauges_are_exported(endpoint: str, model: str) -> None:
    now = scrape(endpoint)
    for gauge in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"):
        assert now.has(gauge), gauge
    assert now.value("vllm:num_requests_running", model_name=model) == 0


def test_rpcs_are_counted_by_method_code_and_reason(client: InferenceClient, endpoint: str) -> None:
    generate = {"grpc_service": INFERENCE, "grpc_method": GENERATE}
    before = scrape(endpoint)
    for _ in range(2):
        client.generate(token_ids=PROMPT_IDS, **FIXED_LENGTH)
    with pytest.raises(ServerError) as refused:
        client.generate(token_ids=[1, 2, 151936], max_tokens=MAX_TOKENS)
    assert (refused.value.code, refused.value.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "TOKEN_OUT_OF_VOCABULARY")
    client.model_info()
    after = scrape(endpoint)

    def grew(name: str, **labels: str) -> float:
        return after.value(name, **labels) - before.value(name, **labels)

    assert grew("grpc_server_started_total", grpc_type="server_stream", **generate) == 3
    assert grew("grpc_server_handled_total", grpc_code="OK", **generate) == 2
    assert grew("grpc_server_handled_total", grpc_code="INVALID_ARGUMENT", **generate) == 1
    assert (
        grew("grpc_server_errors_total", grpc_code="INVALID_ARGUMENT", reason="TOKEN_OUT_OF_VOCABULARY", **generate)
        == 1
    )
    assert grew("grpc_server_errors_total", **generate) == 1
    assert grew("grpc_server_handling_seconds_count", **generate) == 3
    # The refused call sent no message.
    assert grew("grpc_server_first_message_seconds_count", **generate) == 2
    assert after.value("grpc_server_active_streams", **generate) == 0
    assert grew("grpc_server_handled_total", grpc_type="unary", grpc_method="GetModelInfo", grpc_code="OK") == 1


def test_a_poc_round_shows_rounds_nonces_and_its_rate(
    metrics_server: tuple[ServerProcess, str], endpoint: str, model: str
) -> None:
    server, _ = metrics_server
    before = scrape(endpoint)
    with grpc.insecure_channel(server.target) as channel:
        poc = poc_pb2_grpc.PocServiceStub(channel)
        request = poc_pb2.StartRoundRequest(
            params=poc_pb2.PocParams(model=model, seq_len=64),
            batch_size=8,
            block_hash="metrics-block",
            public_key="metrics-key",
        )
        poc.StartRound(request)
        try:
            wait_for_nonces(poc)
            during = scrape(endpoint)
        finally:
            stopped = poc.StopRound(poc_pb2.StopRoundRequest()).status
    after = scrape(endpoint)

    assert during.value("mlnode_poc_round_running") == 1
    assert during.value("mlnode_poc_nonces_total") - before.value("mlnode_poc_nonces_total") > 0
    assert during.value("mlnode_poc_nonces_per_second") > 0
    assert stopped.state == poc_pb2.ROUND_STATE_STOPPED and stopped.nonces_produced > 0
    assert after.value("mlnode_poc_nonces_total") - before.value("mlnode_poc_nonces_total") == stopped.nonces_produced
    assert after.value("mlnode_poc_rounds_started_total") - before.value("mlnode_poc_rounds_started_total") == 1
    ended = {"outcome": "stopped"}
    assert (
        after.value("mlnode_poc_rounds_ended_total", **ended) - before.value("mlnode_poc_rounds_ended_total", **ended)
        == 1
    )
    assert (after.value("mlnode_poc_round_running"), after.value("mlnode_poc_nonces_per_second")) == (0, 0)
    for method in ("StartRound", "StopRound"):
        handled = {"grpc_service": POC, "grpc_method": method, "grpc_code": "OK"}
        assert (
            after.value("grpc_server_handled_total", **handled) - before.value("grpc_server_handled_total", **handled)
            == 1
        )


def test_a_callback_the_receiver_rejects_is_given_up_and_counted(
    metrics_server: tuple[ServerProcess, str], endpoint: str, model: str
) -> None:
    server, _ = metrics_server
    rejected = {"reason": "rejected"}
    before = scrape(endpoint)
    with HttpReceiver(fail_first=10**9, fail_status=400) as receiver, grpc.insecure_channel(server.target) as channel:
        poc = poc_pb2_grpc.PocServiceStub(channel)
        request = poc_pb2.StartRoundRequest(
            params=poc_pb2.PocParams(model=model, seq_len=64),
            batch_size=8,
            block_hash="metrics-block",
            public_key="metrics-key",
            callback_url=receiver.url,
        )
        poc.StartRound(request)
        try:
            wait_for_nonces(poc)
        finally:
            stopped = poc.StopRound(poc_pb2.StopRoundRequest()).status
        deadline = time.monotonic() + ROUND_TIMEOUT_SECONDS
        while (after := scrape(endpoint)).value("mlnode_poc_callback_entries_pending") > 0:
            assert time.monotonic() < deadline, "the round's callbacks were never settled"
            time.sleep(0.1)
    given_up = after.value("mlnode_poc_callback_artifacts_given_up_total", **rejected)
    assert (
        given_up - before.value("mlnode_poc_callback_artifacts_given_up_total", **rejected) == stopped.nonces_produced
    )
    assert after.value("mlnode_poc_callback_entries_given_up_total", **rejected) > before.value(
        "mlnode_poc_callback_entries_given_up_total", **rejected
    )
    assert after.value("mlnode_poc_callback_entries_delivered_total") == before.value(
        "mlnode_poc_callback_entries_delivered_total"
    )
    assert after.value("mlnode_poc_callback_failed_attempts_total") > before.value(
        "mlnode_poc_callback_failed_attempts_total"
    )
    assert "given up (rejected)" in server.log_path.read_text()


def wait_for_nonces(poc: poc_pb2_grpc.PocServiceStub) -> None:
    """Until the running round has published nonces (the deadline only ends a hung test)."""
    deadline = time.monotonic() + ROUND_TIMEOUT_SECONDS
    while poc.GetRoundStatus(poc_pb2.GetRoundStatusRequest()).status.nonces_produced == 0:
        if time.monotonic() > deadline:
            pytest.fail(f"the round published no nonce in {ROUND_TIMEOUT_SECONDS} s")
        time.sleep(0.1)


def test_only_the_metrics_path_is_served(endpoint: str) -> None:
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(f"{endpoint}/", timeout=SCRAPE_TIMEOUT_SECONDS)
    assert missing.value.code == 404
