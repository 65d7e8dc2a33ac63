"""The inference port answers as vLLM's own OpenAI server answers, on the same embedded model: the same usage counts
(the API node checks claimed against replayed counts, 3 tokens of slack: spec section 4), the same greedy token ids,
finish reasons and /tokenize counts, for chat (plain, multi-part, with template arguments, streamed) and completions
(text and token ids). The two servers run one after the other (one engine's memory at a time)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from tests.support.server_process import SERVER_LAYER_FLAGS, engine_environment, free_port, start_server

TIMEOUT_SECONDS = 120.0
VLLM_START_SECONDS = 600.0
EMBEDDED_NAME = "qwen3-tiny-embedded"
GREEDY: dict[str, Any] = {"temperature": 0.0, "max_tokens": 6, "ignore_eos": True, "return_token_ids": True}
CHAT: list[dict[str, Any]] = [
    {"messages": [{"role": "user", "content": "Name three colours."}]},
    {
        "messages": [
            {"role": "system", "content": "Answer briefly."},
            {"role": "user", "content": [{"type": "text", "text": "One"}, {"type": "text", "text": "Two"}]},
            {"role": "assistant", "content": "Yes?"},
            {"role": "user", "content": "Go on."},
        ]
    },
    {"messages": [{"role": "user", "content": "Think."}], "chat_template_kwargs": {"enable_thinking": False}},
]
COMPLETIONS: list[dict[str, Any]] = [{"prompt": "The quick brown fox"}, {"prompt": [9707, 1879, 11, 419]}]
TOKENIZE: list[dict[str, Any]] = [{"prompt": "The quick brown fox"}, {"messages": CHAT[1]["messages"]}]


def counts(usage: dict[str, Any]) -> tuple[int, int, int]:
    return usage["prompt_tokens"], usage["completion_tokens"], usage["total_tokens"]


def answers(base_url: str) -> dict[str, Any]:
    """What each request is answered: usage, token ids, finish reason; /tokenize's counts."""
    seen: dict[str, Any] = {}
    with httpx.Client(base_url=base_url, timeout=TIMEOUT_SECONDS) as http:
        for index, body in enumerate(CHAT):
            answer = http.post("/v1/chat/completions", json={"model": EMBEDDED_NAME, **GREEDY, **body}).json()
            choice = answer["choices"][0]
            seen[f"chat {index}"] = (counts(answer["usage"]), choice["token_ids"], choice["finish_reason"])
        streamed = {
            "model": EMBEDDED_NAME,
            **GREEDY,
            **CHAT[0],
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        with http.stream("POST", "/v1/chat/completions", json=streamed) as events:
            lines = [line for line in events.iter_lines() if line.startswith("data: {")]
        seen["chat streamed usage"] = counts(json.loads(lines[-1].removeprefix("data: "))["usage"])
        for index, body in enumerate(COMPLETIONS):
            answer = http.post("/v1/completions", json={"model": EMBEDDED_NAME, **GREEDY, **body}).json()
            choice = answer["choices"][0]
            seen[f"completion {index}"] = (counts(answer["usage"]), choice["token_ids"], choice["finish_reason"])
        for index, body in enumerate(TOKENIZE):
            seen[f"tokenize {index}"] = http.post("/tokenize", json={"model": EMBEDDED_NAME, **body}).json()["count"]
    return seen


def vllm_answers(model_dir: Path, log_path: Path) -> dict[str, Any]:
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model_dir),
        "--served-model-name",
        EMBEDDED_NAME,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--enforce-eager",
    ]
    with open(log_path, "w") as log:
        process = subprocess.Popen(command, env=engine_environment(), stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + VLLM_START_SECONDS
        while True:
            assert process.poll() is None, log_path.read_text()[-4000:]
            assert time.monotonic() < deadline, "vLLM's OpenAI server did not start"
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(1)
        return answers(f"http://127.0.0.1:{port}")
    finally:
        process.terminate()
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def test_usage_token_ids_and_counts_equal_vllms_own_server(tmp_path: Path, model_dir: Path) -> None:
    inference_port = free_port()
    server = start_server(tmp_path / "server.log", ["--inference-port", str(inference_port), *SERVER_LAYER_FLAGS])
    try:
        ours = answers(f"http://127.0.0.1:{inference_port}")
    finally:
        assert server.stop() == 0, server.log_tail()
    theirs = vllm_answers(model_dir, tmp_path / "vllm.log")
    for name in theirs:
        print(f"{name:24} ours {ours[name]!s:60.60} vLLM {theirs[name]!s:.60}")
    assert ours == theirs
