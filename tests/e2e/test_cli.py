"""The CLI (`python -m gonka.mlnode.client`) in subprocesses against the shared server: --json on the
plain RPCs, and `--record` piped into `validate-inference`, which passes the honest record and
fails a tampered one."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from gonka.mlnode.client import InferenceClient
from gonka.mlnode.v1 import inference_pb2 as pb
from tests.support.server_process import REPO_ROOT, ServerProcess

TIMEOUT = 180
THRESHOLD = 0.94
# An executor's sampled generation, recorded with the network's 5-entry chain lists.
SAMPLED = [
    "--max-tokens",
    "12",
    "--temperature",
    "0.99",
    "--seed",
    "11",
    "--logprobs",
    "5",
    "--logprobs-mode",
    "processed",
]
PROMPT = "Once upon a time"


def command(server: ServerProcess, *argv: str) -> list[str]:
    return [sys.executable, "-m", "gonka.mlnode.client", "--target", server.target, *argv]


def cli(server: ServerProcess, *argv: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        command(server, *argv),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        cwd=REPO_ROOT,
        env=dict(os.environ),
        check=False,
    )


def recorded(server: ServerProcess, *argv: str) -> dict:
    done = cli(server, *argv, *SAMPLED, "--record")
    assert done.returncode == 0, done.stderr
    [line] = done.stdout.splitlines()
    return json.loads(line)


def json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines()]


def test_info_and_status_json_are_the_rpcs_answers(server: ServerProcess, client: InferenceClient) -> None:
    info = cli(server, "info", "--json")
    assert info.returncode == 0, info.stderr
    model = json.loads(info.stdout)
    expected = client.model_info()
    assert (model["served_model_name"], model["vocab_size"], model["eos_token_id"]) == (
        expected.served_model_name,
        expected.vocab_size,
        expected.eos_token_id,
    )
    assert {
        "max_context_length",
        "max_logprobs",
        "has_chat_template",
        "max_prompt_chars",
        "max_request_bytes",
    } <= model.keys()
    status = cli(server, "status", "--json")
    assert status.returncode == 0, status.stderr
    server_status = json.loads(status.stdout)
    assert {"active_streams", "uptime_seconds", "versions", "engine_processes"} <= server_status.keys()
    assert server_status["uptime_seconds"] > 0 and server_status["engine_processes"]  # the CLI asks for them


def test_a_completion_streams_as_json_lines(server: ServerProcess) -> None:
    done = cli(
        server,
        "complete",
        PROMPT,
        "--max-tokens",
        "6",
        "--temperature",
        "0",
        "--logprobs",
        "2",
        "--chain-top-logprobs",
        "--json",
    )
    assert done.returncode == 0, done.stderr
    messages = json_lines(done.stdout)
    tokens = [token for message in messages for token in message["tokens"]["ids"]]
    finish = messages[-1]["finish"]
    assert (
        finish["reason"] in ("FINISH_REASON_LENGTH", "FINISH_REASON_STOP")
        and finish["usage"]["completion_tokens"] == len(tokens) > 0
    )
    assert all(len(message["tokens"]["chain_top_ids"]) == 2 * len(message["tokens"]["ids"]) for message in messages)
    assert "".join(message["text"] for message in messages)


def test_abort_json_prints_the_empty_answer_and_an_unknown_request_fails(
    server: ServerProcess, client: InferenceClient
) -> None:
    stream = client.stream(
        token_ids=[9707, 1879, 11], max_tokens=4000, ignore_eos=True, temperature=0.0, request_id="cli-abort"
    )
    received = [next(stream)]  # the request is running: the server has sent its first tokens
    done = cli(server, "abort", "cli-abort", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {}
    received += list(stream)
    assert received[-1].finish.reason == pb.FINISH_REASON_ABORT
    unknown = cli(server, "abort", "no-such-request", "--json")
    assert unknown.returncode == 1 and unknown.stdout == ""
    assert "NOT_FOUND REQUEST_NOT_FOUND (field request_id)" in unknown.stderr


def test_a_recorded_completion_piped_into_validate_inference_passes(server: ServerProcess) -> None:
    recorder = subprocess.Popen(
        command(server, "complete", PROMPT, *SAMPLED, "--record"),
        stdout=subprocess.PIPE,
        cwd=REPO_ROOT,
        env=dict(os.environ),
    )
    try:
        validator = subprocess.run(
            command(server, "validate-inference", "--threshold", str(THRESHOLD), "--json"),
            stdin=recorder.stdout,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            cwd=REPO_ROOT,
            env=dict(os.environ),
            check=False,
        )
    finally:
        recorder.stdout.close()
        assert recorder.wait(timeout=TIMEOUT) == 0
    assert validator.returncode == 0, validator.stderr
    [response] = json_lines(validator.stdout)
    verdict = response["verdict"]
    assert (
        response["index"] == 0 and verdict["passed"] is True and verdict["failure"] == "INFERENCE_FAILURE_UNSPECIFIED"
    )
    assert verdict["similarity"] > 0.999 and (verdict["mode"], verdict["mode_detected"]) == (
        "LOGPROBS_MODE_PROCESSED",
        False,
    )
    assert 1 <= verdict["replayed_tokens"] <= 12
    assert "validate-inference: 1 items: 1 passed, 0 failed, 0 errors" in validator.stderr


def test_a_tampered_record_fails_beside_honest_ones_in_every_request_form(
    server: ServerProcess, client: InferenceClient, tmp_path
) -> None:
    completion = recorded(server, "complete", PROMPT)
    chat = recorded(server, "chat", "Tell me a story")
    tokens = completion["token_ids"]
    assert len(tokens) == 12  # the seed's generation runs to max_tokens
    # An end of sequence claimed in the middle: the replay stops there, a token after it.
    tampered = completion | {"token_ids": tokens[:3] + [client.model_info().eos_token_id] + tokens[4:]}
    # The completion's request as the simple fields instead of proto JSON: the same replay.
    simple = {"prompt": PROMPT, "max_tokens": 12, "temperature": 0.99, "seed": 11} | {
        key: completion[key] for key in ("token_ids", "top_logprobs", "mode")
    }
    out_of_vocabulary = completion | {"token_ids": [151936 + 9] + completion["token_ids"][1:]}
    items = [completion, tampered, simple, chat, out_of_vocabulary]
    path = tmp_path / "items.jsonl"
    path.write_text("".join(json.dumps(item | {"threshold": THRESHOLD}) + "\n" for item in items))
    done = cli(server, "validate-inference", str(path), "--no-progress")
    assert done.returncode == 1, done.stderr  # not every item passed
    lines = {int(line.split(":")[0].removeprefix("item ")): line for line in done.stdout.splitlines()}
    assert sorted(lines) == [0, 1, 2, 3, 4]
    assert all(lines[index].startswith(f"item {index}: passed, ") for index in (0, 2, 3)), lines
    assert lines[1].startswith(
        f"item 1: FAILED length_differs at position 4 (executor token {tokens[4]}), similarity 0.000000, "
    ), lines[1]
    assert lines[4].startswith(
        "item 4: ERROR INVALID_ARGUMENT TOKEN_OUT_OF_VOCABULARY (field positions.token_ids[0]): "
    ), lines[4]
    assert done.stderr.splitlines()[-1] == "validate-inference: 5 items: 3 passed, 1 failed, 1 errors"


def test_more_items_than_one_call_takes_are_sent_in_several(server: ServerProcess) -> None:
    """1025 items (the server takes 1024 per call), each refused before the engine: cheap, yet every one
    comes back, numbered by its place in the input."""
    model = json.loads(cli(server, "info", "--json").stdout)
    beyond = max(model["vocab_size"] - 1, model["tokenizer_max_token_id"]) + 1
    item = {
        "prompt_token_ids": [9707],
        "max_tokens": 1,
        "token_ids": [beyond],
        "top_logprobs": [{str(beyond): -0.1}],
        "threshold": THRESHOLD,
    }
    done = cli(server, "validate-inference", "--json", stdin=(json.dumps(item) + "\n") * 1025)
    assert done.returncode == 1, done.stderr
    responses = json_lines(done.stdout)
    assert sorted(response["index"] for response in responses) == list(range(1025))
    assert {response["error"]["reason"] for response in responses} == {"TOKEN_OUT_OF_VOCABULARY"}
    assert "1025 items: 0 passed, 0 failed, 1025 errors" in done.stderr
