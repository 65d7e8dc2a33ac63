"""The OpenAI-style inference port (--inference-port) of a real server, spoken to with the `openai` package as the
network's API node and validators speak to an ML node (../shared/spec/mlnode-http-api.md sections 2-4): chat and
completions, streamed and not, with logprobs whose tokens are decimal ids and usage as vLLM counts it; a replay
through `enforced_tokens` reproducing the original, its distance (inference-validation.md 3) below the threshold;
each validator rule refused with 400 naming `enforced_tokens`; 503 while a round runs and while the node is STOPPED;
bad bodies refused with a JSON error while the server serves on. The same endpoints answer on the management port."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from engine_ext.consensus.inference_distance import Position, sequence_distance, similarity
from gonka.mlnode.client import InferenceClient
from gonka.mlnode.v1 import inference_pb2
from tests.support.server_process import SERVER_LAYER_FLAGS, free_port, start_server

HTTP_TIMEOUT_SECONDS = 120.0
THRESHOLD = 0.94
MESSAGES = [{"role": "user", "content": "Name three colours."}]
# The random tiny model would end at any token: a fixed length makes outputs comparable.
FIXED_LENGTH = {"ignore_eos": True}
ROUND = {"block_hash": "0x" + "ab" * 32, "block_height": 5, "public_key": "inference-port-key", "seq_len": 64}


@dataclass
class Node:
    api: httpx.Client  # the management port
    port: httpx.Client  # the inference port
    openai: openai.OpenAI
    client: InferenceClient
    model: inference_pb2.GetModelInfoResponse


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory, model_dir: Path) -> Iterator[Node]:
    http_port, inference_port = free_port(), free_port()
    flags = ["--http-port", str(http_port), "--inference-port", str(inference_port), *SERVER_LAYER_FLAGS]
    server = start_server(tmp_path_factory.mktemp("inference-port") / "server.log", flags)
    try:
        with (
            httpx.Client(base_url=f"http://127.0.0.1:{http_port}", timeout=HTTP_TIMEOUT_SECONDS) as api,
            httpx.Client(base_url=f"http://127.0.0.1:{inference_port}", timeout=HTTP_TIMEOUT_SECONDS) as port,
            openai.OpenAI(
                base_url=f"http://127.0.0.1:{inference_port}/v1",
                api_key="unused",
                max_retries=0,
                timeout=HTTP_TIMEOUT_SECONDS,
            ) as client,
            InferenceClient(server.target) as grpc_client,
        ):
            yield Node(api, port, client, grpc_client, grpc_client.model_info())
    finally:
        exit_code = server.stop()
    assert exit_code == 0, f"server exited with {exit_code} on SIGTERM:\n{server.log_tail()}"


def chat(node: Node, **fields: Any) -> Any:
    extra = fields.pop("extra_body", {})
    return node.openai.chat.completions.create(
        model=node.model.served_model_name,
        messages=fields.pop("messages", MESSAGES),
        extra_body=FIXED_LENGTH | extra,
        **fields,
    )


def positions(content: list[Any]) -> list[Position]:
    return [(int(entry.token), {int(top.token): top.logprob for top in entry.top_logprobs}) for entry in content]


def error_of(response: httpx.Response, status: int) -> dict:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    return response.json()["error"]


def test_health_and_models_name_the_served_model(node: Node) -> None:
    assert node.port.get("/health").status_code == 200
    models = node.openai.models.list()
    assert [model.id for model in models.data] == [node.model.served_model_name]
    # Under the API node's version prefix, and on the management port (spec section 0).
    assert node.port.get("/v3.1.0/v1/models").json()["data"][0]["id"] == node.model.served_model_name
    assert node.api.get("/v1/models").json()["data"][0]["id"] == node.model.served_model_name


def test_chat_answers_decimal_token_ids_with_logprobs_and_usage(node: Node) -> None:
    answer = chat(
        node, max_tokens=8, temperature=0.0, logprobs=True, top_logprobs=5, extra_body={"return_token_ids": True}
    )
    choice = answer.choices[0]
    content = choice.logprobs.content
    assert len(content) == 8 == answer.usage.completion_tokens
    assert choice.finish_reason == "length"
    for entry in content:
        assert entry.token.isdigit() and 0 <= int(entry.token) <= node.model.tokenizer_max_token_id
        assert len(entry.top_logprobs) == 5
        assert all(top.token.isdigit() for top in entry.top_logprobs)
        # Greedy: the chosen token is the model's best, listed first.
        assert entry.top_logprobs[0].token == entry.token
    token_ids = [int(entry.token) for entry in content]
    assert choice.model_extra["token_ids"] == token_ids
    # The same chat over gRPC: the same prompt (so the same usage) and the same greedy tokens.
    over_grpc = node.client.generate(
        messages=[("user", MESSAGES[0]["content"])], max_tokens=8, temperature=0.0, ignore_eos=True
    )
    assert len(answer.model_extra["prompt_token_ids"]) == answer.usage.prompt_tokens
    assert over_grpc.first.token_ids == token_ids
    assert over_grpc.first.usage is not None
    assert answer.usage.prompt_tokens == over_grpc.first.usage.prompt_tokens
    assert answer.usage.total_tokens == answer.usage.prompt_tokens + 8
    counted = node.port.post("/tokenize", json={"model": node.model.served_model_name, "messages": MESSAGES})
    assert counted.json()["count"] == answer.usage.prompt_tokens


def test_a_streamed_chat_carries_the_same_tokens_and_usage_last(node: Node) -> None:
    whole = chat(node, max_tokens=6, temperature=0.0, logprobs=True, top_logprobs=3)
    stream = chat(
        node,
        max_tokens=6,
        temperature=0.0,
        logprobs=True,
        top_logprobs=3,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    streamed = [
        entry
        for chunk in chunks
        if chunk.choices and chunk.choices[0].logprobs
        for entry in chunk.choices[0].logprobs.content
    ]
    assert [entry.token for entry in streamed] == [entry.token for entry in whole.choices[0].logprobs.content]
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [chunk.choices[0].finish_reason for chunk in chunks if chunk.choices][-1] == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.model_dump() == whole.usage.model_dump()
    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    assert text == whole.choices[0].message.content


def test_completions_count_the_prompt_as_tokenize_does(node: Node) -> None:
    prompt = "The quick brown fox"
    answer = node.openai.completions.create(
        model=node.model.served_model_name,
        prompt=prompt,
        max_tokens=4,
        temperature=0.0,
        logprobs=2,
        extra_body=FIXED_LENGTH,
    )
    counted = node.port.post("/tokenize", json={"model": node.model.served_model_name, "prompt": prompt}).json()
    assert answer.usage.prompt_tokens == counted["count"] == len(counted["tokens"])
    assert answer.usage.completion_tokens == 4
    assert all(token.isdigit() for token in answer.choices[0].logprobs.tokens)


def test_a_replay_through_enforced_tokens_reproduces_the_original_within_the_threshold(node: Node) -> None:
    sampled = {"max_tokens": 16, "temperature": 1.5, "logprobs": True, "top_logprobs": 5}
    network = {"logprobs_mode": "processed_logprobs", "skip_special_tokens": False, "return_token_ids": True}
    original = chat(node, seed=7, **sampled, extra_body=network).choices[0].logprobs.content
    enforced = {"tokens": [{"token": e.token, "top_tokens": [t.token for t in e.top_logprobs]} for e in original]}
    # Another seed samples other tokens unless they are enforced.
    unforced = chat(node, seed=8, **sampled, extra_body=network).choices[0].logprobs.content
    assert [e.token for e in unforced] != [e.token for e in original]
    replay = chat(node, seed=8, **sampled, extra_body=network | {"enforced_tokens": enforced}).choices[0]
    assert [e.token for e in replay.logprobs.content] == [e.token for e in original]
    distance = sequence_distance(positions(original), positions(replay.logprobs.content), k=5)
    assert 0 <= distance < 0.05 and similarity(distance) > THRESHOLD, distance


@pytest.mark.parametrize(
    "fault",
    [
        "65 top tokens",
        "a token that is text",
        "a top token that is negative",
        "an id past the vocabulary",
        "more positions than max_tokens",
    ],
)
def test_each_validator_rule_is_a_400_naming_enforced_tokens(node: Node, fault: str) -> None:
    tokens = [{"token": "9707", "top_tokens": ["9707", "1"]}] * 3
    outside = str(max(node.model.vocab_size, node.model.tokenizer_max_token_id + 1))
    max_tokens = 4
    if fault == "65 top tokens":
        tokens = [{"token": "9707", "top_tokens": [str(i) for i in range(65)]}]
    elif fault == "a token that is text":
        tokens = [{"token": "Hello", "top_tokens": []}]
    elif fault == "a top token that is negative":
        tokens = [{"token": "9707", "top_tokens": ["-1"]}]
    elif fault == "an id past the vocabulary":
        tokens = [{"token": outside, "top_tokens": [outside]}]
    else:
        max_tokens = 2
    body = {
        "model": node.model.served_model_name,
        "messages": MESSAGES,
        "max_tokens": max_tokens,
        "logprobs": True,
        "top_logprobs": 5,
        "enforced_tokens": {"tokens": tokens},
    }
    error = error_of(node.port.post("/v1/chat/completions", json=body), 400)
    assert error["param"] == "enforced_tokens", error
    # 64 top tokens are within the rule.
    body["enforced_tokens"] = {"tokens": [{"token": "9707", "top_tokens": [str(i) for i in range(64)]}]}
    body["max_tokens"] = 4
    assert node.port.post("/v1/chat/completions", json=body).status_code == 200


def test_a_running_round_is_503_on_the_inference_port_until_it_ends(node: Node) -> None:
    started = node.client.poc.start_round(model=node.model.served_model_name, **ROUND, timeout=HTTP_TIMEOUT_SECONDS)
    try:
        with pytest.raises(openai.APIStatusError) as refused:
            chat(node, max_tokens=2)
        assert refused.value.status_code == 503
        # The gate's own refusal, as gRPC's Generate gets it.
        assert refused.value.response.json()["error"]["type"] == "POC_IN_PROGRESS"
        assert int(refused.value.response.headers["retry-after"]) >= 1
    finally:
        node.client.poc.stop_round(started.round_id, timeout=HTTP_TIMEOUT_SECONDS)
    assert len(chat(node, max_tokens=2).choices[0].message.content or "x") > 0


def test_a_stopped_node_is_503_until_inference_up(node: Node) -> None:
    assert node.api.post("/api/v1/stop").json() == {"status": "OK"}
    try:
        with pytest.raises(openai.APIStatusError) as refused:
            chat(node, max_tokens=2)
        assert refused.value.status_code == 503
        assert node.port.get("/health").status_code == 503
        assert (
            error_of(node.port.post("/v1/completions", json={"prompt": "x"}), 503)["type"] == "ServiceUnavailableError"
        )
    finally:
        assert node.api.post("/api/v1/inference/up", json={"model": node.model.served_model_name}).status_code == 200
    assert chat(node, max_tokens=2).usage.completion_tokens == 2
    assert node.port.get("/health").status_code == 200


def test_bad_bodies_are_json_errors_and_the_port_serves_on(node: Node) -> None:
    path = "/v1/chat/completions"
    # vLLM's OpenAI server answers 400 (not FastAPI's 422) to a body it cannot read, JSON or shape.
    assert "not JSON" in error_of(node.port.post(path, content=b"{not json"), 400)["message"]
    wrong_type = error_of(node.port.post(path, json={"messages": MESSAGES, "max_tokens": "many"}), 400)
    assert wrong_type["param"] == "max_tokens"
    assert error_of(node.port.post(path, json={"model": node.model.served_model_name}), 400)["param"] == "messages"
    assert error_of(node.port.post(path, json=[1, 2]), 400)["code"] == 400
    unknown = error_of(node.port.post(path, json={"model": "no-such-model", "messages": MESSAGES}), 404)
    assert unknown["param"] == "model"
    # An over-long answer is vLLM's 400 too (the context cannot hold it).
    too_long = {"messages": MESSAGES, "max_tokens": node.model.max_context_length + 1}
    assert error_of(node.port.post(path, json=too_long), 400)["param"] == "max_tokens"
    # A body without Content-Type is read as JSON.
    bare = node.port.post(path, content=b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}')
    assert bare.status_code == 200, bare.text
    assert chat(node, max_tokens=1).usage.completion_tokens == 1


def long_stream(node: Node) -> dict[str, Any]:
    return {
        "model": node.model.served_model_name,
        "messages": MESSAGES,
        "max_tokens": 4000,
        "ignore_eos": True,
        "stream": True,
    }


def wait_for_no_streams(node: Node) -> None:
    deadline = time.monotonic() + 30
    while node.client.server_status().active_streams:
        assert time.monotonic() < deadline, "the engine request outlived its HTTP stream"
        time.sleep(0.2)


def test_a_stream_the_client_leaves_is_aborted_on_the_engine(node: Node) -> None:
    with node.port.stream("POST", "/v1/chat/completions", json=long_stream(node)) as events:
        lines = events.iter_lines()
        assert next(line for line in lines if line.startswith("data: {"))
        assert node.client.server_status().active_streams == 1
    wait_for_no_streams(node)


def test_a_round_that_starts_mid_stream_ends_it_with_an_error_event(node: Node) -> None:
    with node.port.stream("POST", "/v1/chat/completions", json=long_stream(node)) as events:
        lines = events.iter_lines()
        assert next(line for line in lines if line.startswith("data: {"))
        started = node.client.poc.start_round(model=node.model.served_model_name, **ROUND, timeout=HTTP_TIMEOUT_SECONDS)
        try:
            rest = [line for line in lines if line.startswith("data: ")]
        finally:
            node.client.poc.stop_round(started.round_id, timeout=HTTP_TIMEOUT_SECONDS)
    assert rest[-1] == "data: [DONE]"
    error = json.loads(rest[-2].removeprefix("data: "))["error"]
    assert (error["type"], error["code"]) == ("POC_PREEMPTED", 503)
    wait_for_no_streams(node)
