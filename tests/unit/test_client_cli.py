"""The CLI's formats that need no server: ValidateInference items as JSON lines (what `--record`
writes and `validate-inference` reads), the verdict lines and tally, and the command lines refused
before anything is sent."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from google.protobuf import json_format

from gonka.mlnode.client import Generation, build_request, inference_item
from gonka.mlnode.client.cli import build_parser, main
from gonka.mlnode.client.cli_io import message_json
from gonka.mlnode.client.inference_records import parse_items, record
from gonka.mlnode.client.verdicts import Tally, verdict_line
from gonka.mlnode.v1 import inference_pb2 as pb
from gonka.mlnode.v1 import validation_pb2 as vpb

TOKENS = [11, 7, 3]
# The chain's lists: the sampled token first, then the model's best others.
CHAIN = [{11: -0.5, 2: -1.25}, {7: -0.125, 11: -3.0}, {3: -9999.0, 0: -0.75}]
TOP = [{str(token): logprob for token, logprob in top.items()} for top in CHAIN]


def generation_with_chain_lists() -> Generation:
    generation = Generation()
    for start in (0, 2):
        ids, lists = TOKENS[start : start + 2], CHAIN[start : start + 2]
        batch = pb.TokenBatch(
            ids=ids,
            logprobs=[top[token] for token, top in zip(ids, lists)],
            ranks=[1] * len(ids),
            top_k=2,
            top_ids=[token for top in lists for token in top],
            top_logprobs=[value for top in lists for value in top.values()],
            chain_top_ids=[token for top in lists for token in top],
            chain_top_logprobs=[value for top in lists for value in top.values()],
        )
        generation.add(pb.GenerateResponse(request_id="r", tokens=batch))
    return generation


def line(**fields) -> str:
    return json.dumps(fields) + "\n"


# --- items: --record's output read back ------------------------------------------------------


def test_a_record_reads_back_as_the_item_the_library_builds() -> None:
    request = build_request(
        prompt="Once",
        max_tokens=3,
        temperature=0.99,
        seed=11,
        top_logprobs=2,
        chain_top_logprobs=True,
        include_text=True,
    )
    written = record(request, generation_with_chain_lists().first, "processed")
    assert "threshold" not in written  # the validator's to give
    assert written["top_logprobs"] == TOP and written["token_ids"] == TOKENS
    [item] = parse_items(json.dumps(written) + "\n")
    assert item == inference_item(request, TOKENS, CHAIN, threshold=None, mode="processed")
    assert not item.HasField("threshold")


def test_a_record_needs_a_chain_list_per_token() -> None:
    generation = Generation()
    generation.add(pb.GenerateResponse(tokens=pb.TokenBatch(ids=TOKENS, logprobs=[-1.0] * 3, ranks=[1] * 3)))
    with pytest.raises(ValueError, match="3 tokens but 0 chain lists"):
        record(build_request(prompt="Once"), generation.first, None)


def test_the_request_may_be_simple_fields_or_proto_json_in_either_spelling() -> None:
    positions = dict(token_ids=TOKENS, top_logprobs=TOP, threshold=0.94)
    text = "".join(
        [
            line(prompt="Once", max_tokens=3, temperature=0.5, seed=2, stop=["\n"], **positions),
            line(
                messages=[["system", "Be brief"], {"role": "user", "content": "Hi"}],
                json_schema='{"type": "object"}',
                **positions,
            ),
            "\n",  # blank lines are skipped
            line(prompt_token_ids=[9707, 1879], max_tokens=3, **positions),
            line(
                request={"tokenIds": {"ids": [9707, 1879]}, "sampling": {"maxTokens": 3, "seed": "5"}},
                mode="raw",
                **positions,
            ),
        ]
    )
    simple, chat, ids, camel = parse_items(text)
    assert simple.request == build_request(prompt="Once", max_tokens=3, temperature=0.5, seed=2, stop=["\n"])
    assert chat.request == build_request(
        messages=[("system", "Be brief"), ("user", "Hi")], json_schema='{"type": "object"}'
    )
    assert ids.request == build_request(token_ids=[9707, 1879], max_tokens=3)
    assert camel.request == pb.GenerateRequest(
        token_ids=pb.TokenIds(ids=[9707, 1879]), sampling=pb.SamplingOptions(max_tokens=3, seed=5)
    )
    assert (camel.mode, simple.mode) == (pb.LOGPROBS_MODE_RAW, pb.LOGPROBS_MODE_UNSPECIFIED)
    assert all(
        item.threshold == 0.94 and list(item.positions.token_ids) == TOKENS and item.positions.top_k == 2
        for item in (simple, chat, ids, camel)
    )
    assert list(simple.positions.top_ids) == [11, 2, 7, 11, 3, 0]  # each position's list in its recorded order


def test_an_executor_that_could_not_serve_needs_no_positions() -> None:
    [item] = parse_items(line(prompt="Once", executor_could_not_serve=True, threshold=0.5))
    assert item.executor_could_not_serve and not item.positions.token_ids and item.threshold == 0.5


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no items"),
        ("\n  \n", "no items"),
        ("{", "line 1: Expecting property name"),
        ("[1, 2]", "line 1: expected an item object, got list"),
        (
            line(prompt="a", token_ids=[1], top_logprobs=[{"1": 0}], threshhold=0.9),
            "line 1: unknown key\\(s\\) threshhold",
        ),
        (
            line(prompt="a", token_ids=[1], top_logprobs=[{"1": 0}]) + line(token_ids=[1], top_logprobs=[{"1": 0}]),
            "line 2: no request",
        ),
        (
            line(request={"text": "a"}, max_tokens=3, token_ids=[1], top_logprobs=[{"1": 0}]),
            "either as `request` or as simple fields, not both \\(max_tokens\\)",
        ),
        (line(request={"txt": "a"}, token_ids=[1], top_logprobs=[{"1": 0}]), "line 1: .*txt"),
        (line(request="a", token_ids=[1], top_logprobs=[{"1": 0}]), "request must be a GenerateRequest object"),
        (line(prompt="a", top_logprobs=[{"1": 0}]), "token_ids must be a list of token ids"),
        (
            line(prompt="a", token_ids=[1, True], top_logprobs=[{"1": 0}, {"1": 0}]),
            "token_ids must be a list of token ids",
        ),
        (line(prompt="a", token_ids=[-1], top_logprobs=[{"1": 0}]), "token_ids must be a list of token ids"),
        (line(prompt="a", token_ids=[1]), "top_logprobs must be a list"),
        (line(prompt="a", token_ids=[1, 2], top_logprobs=[{"1": 0}]), "2 token ids but 1 top-k lists"),
        (
            line(prompt="a", token_ids=[1, 2], top_logprobs=[{"1": 0}, {"1": 0, "2": -1}]),
            "position 1 has 2 top-k entries, position 0 has 1",
        ),
        (line(prompt="a", token_ids=[1], top_logprobs=[{"x": 0}]), "key 'x' is not a token id"),
        (line(prompt="a", token_ids=[1], top_logprobs=[{"1": "low"}]), "top_logprobs\\[0\\]\\[1\\] must be a number"),
        (line(prompt="a", token_ids=[1], top_logprobs=[{"1": 0}], threshold="high"), "threshold must be a number"),
        (line(prompt="a", token_ids=[1], top_logprobs=[{"1": 0}], mode="fast"), 'mode must be "raw" or "processed"'),
        (line(prompt="a", executor_could_not_serve="yes"), "executor_could_not_serve must be true or false"),
        (line(messages=[["robot", "beep"]], token_ids=[1], top_logprobs=[{"1": 0}]), "unknown chat role"),
        (line(messages=[["user"]], token_ids=[1], top_logprobs=[{"1": 0}]), "a message is \\[role, content\\]"),
        (line(prompt="a", temperature="hot", token_ids=[1], top_logprobs=[{"1": 0}]), "line 1: temperature: "),
        (line(prompt="a", seed=2**70, token_ids=[1], top_logprobs=[{"1": 0}]), "line 1: seed: "),
        (line(prompt="a", token_ids=[2**32], top_logprobs=[{"1": 0}]), "token_ids must be a list of token ids"),
    ],
)
def test_bad_items_are_refused_with_their_line(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_items(text)


# --- verdicts ---------------------------------------------------------------------------------


def test_verdicts_read_as_one_line_each_and_add_up() -> None:
    passed = vpb.ValidateInferenceResponse(
        index=0,
        verdict=vpb.InferenceVerdict(
            passed=True,
            distance=0.0001,
            similarity=0.9999,
            top_ids_found=1.0,
            mode=pb.LOGPROBS_MODE_PROCESSED,
            replayed_tokens=12,
        ),
    )
    differs = vpb.ValidateInferenceResponse(
        index=3,
        verdict=vpb.InferenceVerdict(
            failure=vpb.INFERENCE_FAILURE_TOKEN_DIFFERS,
            distance=-1,
            first_differing_position=7,
            executor_token_id=5,
            replay_token_id=9,
            mode=pb.LOGPROBS_MODE_RAW,
            mode_detected=True,
        ),
    )
    far = vpb.ValidateInferenceResponse(
        index=1,
        verdict=vpb.InferenceVerdict(
            failure=vpb.INFERENCE_FAILURE_SIMILARITY_BELOW_THRESHOLD,
            distance=0.5,
            similarity=0.5,
            first_differing_position=0,
        ),
    )
    error = vpb.ValidateInferenceResponse(
        index=2,
        error=vpb.ItemError(code="UNAVAILABLE", reason="ENGINE_DEAD", message="the engine died", retryable=True),
    )
    assert verdict_line(passed) == (
        "item 0: passed, similarity 0.999900, distance 0.0001, top ids found 100%, 12 tokens replayed, mode processed"
    )
    assert verdict_line(differs).startswith(
        "item 3: FAILED token_differs at position 7 (executor token 5, replay token 9), similarity 0.000000, distance -1,"
    )
    assert verdict_line(differs).endswith("mode raw (detected)")
    assert verdict_line(far).startswith("item 1: FAILED similarity_below_threshold, similarity 0.500000")
    assert verdict_line(error) == "item 2: ERROR UNAVAILABLE ENGINE_DEAD: the engine died (retryable)"
    tally = Tally(5)
    for response in (passed, differs, far, error):
        tally.add(response)
    assert str(tally) == "5 items: 1 passed, 2 failed, 1 errors, 1 unanswered" and not tally.all_passed
    alone = Tally(1)
    alone.add(passed)
    assert str(alone) == "1 items: 1 passed, 0 failed, 0 errors" and alone.all_passed


def test_verdict_json_is_the_proto_json_of_the_response() -> None:
    response = vpb.ValidateInferenceResponse(
        index=4, error=vpb.ItemError(code="INVALID_ARGUMENT", reason="INVALID_FIELD", field="threshold")
    )
    document = json.loads(message_json(response))
    assert (
        document["index"] == 4 and document["error"]["field"] == "threshold" and document["error"]["retryable"] is False
    )
    assert json_format.ParseDict(document, vpb.ValidateInferenceResponse()) == response


# --- command lines ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["chat", "hi"],
        ["complete", "hi"],
        ["info"],
        ["status"],
        ["abort", "r"],
        ["round", "status"],
        ["subscribe"],
        ["compute", "--block-hash", "h", "--public-key", "k", "--seq-len", "8", "1"],
    ],
)
def test_every_command_takes_json(argv: list[str]) -> None:
    assert build_parser().parse_args([*argv, "--json"]).json is True


def test_validate_inference_reads_a_file_and_the_threshold_flag_replaces_the_items(tmp_path: Path) -> None:
    path = tmp_path / "items.jsonl"
    path.write_text(
        line(prompt="a", token_ids=[1], top_logprobs=[{"1": 0}], threshold=0.5)
        + line(prompt="b", token_ids=[2], top_logprobs=[{"2": 0}])
    )
    args = build_parser().parse_args(["validate-inference", str(path), "--threshold", "0.9", "--json"])
    assert [item.request.text for item in args.items] == ["a", "b"] and args.threshold == 0.9 and args.json


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["complete", "hi", "--record"], "--record and --chain-top-logprobs need --logprobs K >= 1"),
        (["chat", "hi", "--chain-top-logprobs", "--logprobs", "0"], "need --logprobs K >= 1"),
        (["complete", "hi", "--logprobs", "5", "--record", "--json"], "not allowed with argument"),
        (["complete", "hi", "--logprobs-mode", "exact"], "invalid choice"),
        (["validate-inference", "{items}"], "line 2: unknown key\\(s\\) nope"),
        (["validate-inference", "missing.jsonl"], "cannot read missing.jsonl"),
    ],
)
def test_bad_command_lines_are_usage_errors_before_any_call(
    argv: list[str], message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "items.jsonl").write_text(line(prompt="a", token_ids=[1], top_logprobs=[{"1": 0}]) + line(nope=1))
    with pytest.raises(SystemExit) as exit_info:
        main(["--target", "127.0.0.1:1", *[arg.replace("{items}", "items.jsonl") for arg in argv]])
    assert exit_info.value.code == 2
    assert re.search(message, capsys.readouterr().err)


def test_items_without_a_threshold_need_the_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "items.jsonl"
    path.write_text(
        line(prompt="a", token_ids=[1], top_logprobs=[{"1": 0}], threshold=0.5)
        + line(prompt="b", token_ids=[2], top_logprobs=[{"2": 0}])
    )
    # Nothing listens on port 1: the command must stop before its call.
    assert main(["--target", "127.0.0.1:1", "validate-inference", str(path)]) == 2
    assert "item(s) 1 have no threshold: give --threshold" in capsys.readouterr().err
