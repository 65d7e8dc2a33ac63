"""The Python client's PoC pieces that need no server: the artifact codec (checked against the
consensus core's), request building, the subscription's resume cursor, the CLI's arguments and its
progress line."""

from __future__ import annotations

import base64
import io
import json

import grpc
import numpy as np
import pytest

from engine_ext.consensus import artifact as consensus_artifact
from gonka.mlnode.client import ServerError, batch_b64, batch_vectors, claims_from_json, claims_to_json, decode_batch
from gonka.mlnode.client.artifacts import vector_b64, vector_from_b64
from gonka.mlnode.client.cli import build_parser
from gonka.mlnode.client.cli_io import wants_progress
from gonka.mlnode.client.poc_arguments import parse_claims
from gonka.mlnode.client.poc_requests import compute_artifacts_request, start_round_request, validate_poc_request
from gonka.mlnode.client.progress import CLEAR_LINE, Progress
from gonka.mlnode.client.subscription import SubscriptionCursor, ended_without_end
from gonka.mlnode.v1 import poc_pb2
from tests.unit.test_layering import REPO_ROOT, imported_modules

K = 4
# Values float16 holds exactly, with a sign, a fraction and a subnormal among them.
ROWS = np.array([[1.0, -2.5, 0.099975586, 65504.0], [-0.0, 3.0e-7, 7.25, -1.0]], dtype=np.float16)


def little_endian_batch(rows: np.ndarray, nonces: list[int], sequence: int = 1) -> poc_pb2.ArtifactBatch:
    return poc_pb2.ArtifactBatch(
        sequence=sequence, nonces=nonces, vectors=rows.astype("<f2").tobytes(), k_dim=rows.shape[1]
    )


# --- artifact codec ---------------------------------------------------------------------------


def test_a_batch_decodes_to_its_nonces_and_float16_vectors() -> None:
    batch = little_endian_batch(ROWS, [5, 11])
    vectors = batch_vectors(batch)
    assert vectors.dtype == np.float16 and vectors.shape == (2, K)
    assert vectors.tobytes() == ROWS.tobytes()  # bit for bit, -0.0 and the subnormal included
    pairs = decode_batch(batch)
    assert [nonce for nonce, _ in pairs] == [5, 11]
    assert all(np.array_equal(vector, row) for (_, vector), row in zip(pairs, ROWS))


def test_the_base64_form_is_each_rows_little_endian_bytes() -> None:
    batch = little_endian_batch(ROWS, [5, 11])
    pairs = batch_b64(batch)
    assert pairs == [
        (5, base64.b64encode(ROWS[0].astype("<f2").tobytes()).decode()),
        (11, base64.b64encode(ROWS[1].astype("<f2").tobytes()).decode()),
    ]
    # Little-endian on the wire whatever the host: 1.0 is 0x3C00, so its bytes are 00 3C.
    assert base64.b64decode(pairs[0][1])[:2] == b"\x00\x3c"
    for (_, text), row in zip(pairs, ROWS):
        assert vector_from_b64(text).tobytes() == row.tobytes()
        assert vector_b64(row) == text


def test_the_client_codec_matches_the_consensus_core() -> None:
    """The client's numpy codec and engine_ext.consensus.artifact must agree byte for byte: a claim
    the client encodes is what every validator decodes."""
    rng = np.random.default_rng(7)
    rows = rng.standard_normal((6, 12)).astype(np.float16)
    batch = little_endian_batch(rows, list(range(6)))
    assert [text for _, text in batch_b64(batch)] == consensus_artifact.encode_vectors(rows)
    for (_, text), row in zip(batch_b64(batch), rows):
        assert consensus_artifact.decode_vector(text, 12).tobytes() == row.tobytes()


def test_a_batch_whose_columns_disagree_is_refused() -> None:
    batch = little_endian_batch(ROWS, [5, 11])
    with pytest.raises(ValueError, match="16 vector bytes for 3 nonces"):
        batch_vectors(poc_pb2.ArtifactBatch(nonces=[1, 2, 3], vectors=batch.vectors, k_dim=K))
    with pytest.raises(ValueError, match="k_dim >= 1"):
        batch_b64(poc_pb2.ArtifactBatch(nonces=[1], vectors=b"", k_dim=0))
    with pytest.raises(ValueError, match="not valid base64"):
        vector_from_b64("not base64!")
    with pytest.raises(ValueError, match="whole number of float16"):
        vector_from_b64(base64.b64encode(b"abc").decode())


def test_claims_round_trip_through_the_networks_json() -> None:
    pairs = [(3, "AAA8AA=="), (-4, "AQI=")]
    document = claims_to_json(pairs)
    assert document == [{"nonce": 3, "vector_b64": "AAA8AA=="}, {"nonce": -4, "vector_b64": "AQI="}]
    assert claims_from_json(json.loads(json.dumps(document))) == pairs


@pytest.mark.parametrize(
    ("items", "message"),
    [
        ([{"nonce": "3", "vector_b64": "AQI="}], "nonce must be an integer"),
        ([{"nonce": True, "vector_b64": "AQI="}], "nonce must be an integer"),
        ([{"nonce": 3}], "vector_b64 must be a string"),
        ([[3, "AQI="]], "expected an object"),
    ],
)
def test_malformed_claims_are_refused_with_their_index(items: list, message: str) -> None:
    with pytest.raises(ValueError, match=f"claim 0: {message}"):
        claims_from_json(items)


def test_claims_are_read_as_a_json_list_json_lines_or_one_object() -> None:
    pairs = [(1, "AQI="), (2, "AwQ=")]
    listed = json.dumps(claims_to_json(pairs))
    lines = "\n".join(json.dumps(item) for item in claims_to_json(pairs)) + "\n"
    assert parse_claims(listed) == pairs
    assert parse_claims(lines) == pairs
    assert parse_claims(json.dumps({"nonce": 1, "vector_b64": "AQI="})) == pairs[:1]
    with pytest.raises(ValueError, match="neither a JSON list"):
        parse_claims("[{")


def test_the_client_package_imports_no_engine_or_server_code() -> None:
    """The client must install and run without the server: no engine_ext, server, torch or vllm."""
    engine_side = {"engine_ext", "server", "torch", "vllm"}
    scanned = sorted((REPO_ROOT / "clients" / "python" / "gonka").rglob("*.py"))
    offenders = {
        str(path.relative_to(REPO_ROOT)): sorted(m for m in imported_modules(path) if m.split(".")[0] in engine_side)
        for path in scanned
    }
    assert {path: modules for path, modules in offenders.items() if modules} == {}
    assert any(path.name == "artifacts.py" for path in scanned)


# --- requests ---------------------------------------------------------------------------------


def test_unset_round_parameters_stay_unset_for_the_servers_defaults() -> None:
    request = start_round_request(block_hash="h", public_key="k", model="m", seq_len=64)
    assert not request.params.HasField("k_dim") and not request.HasField("batch_size")
    assert (request.node_count, request.group_count, request.stronger_rng, request.callback_url) == (0, 0, False, "")
    request = start_round_request(
        block_hash="h",
        public_key="k",
        model="m",
        seq_len=64,
        k_dim=8,
        batch_size=4,
        node_id=1,
        node_count=3,
        group_id=1,
        group_count=2,
    )
    assert (
        request.params.k_dim,
        request.batch_size,
        request.node_id,
        request.node_count,
        request.group_id,
        request.group_count,
    ) == (8, 4, 1, 3, 1, 2)
    compute = compute_artifacts_request(block_hash="h", public_key="k", model="m", seq_len=64, nonces=range(3))
    assert (
        list(compute.nonces) == [0, 1, 2]
        and not compute.HasField("batch_size")
        and not compute.params.HasField("k_dim")
    )


def test_claims_travel_as_base64_or_as_bytes_and_thresholds_are_present() -> None:
    request = validate_poc_request(
        block_hash="h",
        public_key="k",
        model="m",
        seq_len=64,
        claims=[(1, "AQI="), (2, b"\x03\x04")],
        dist_threshold=0.0,
        p_mismatch=0.1,
        p_value_threshold=0.05,
    )
    assert [claim.WhichOneof("vector") for claim in request.artifacts] == ["vector_b64", "vector_f16"]
    assert request.artifacts[1].vector_f16 == b"\x03\x04"
    # 0.0 is a real threshold: it must be sent as present, not dropped as proto3's default.
    assert request.stat_test.HasField("dist_threshold") and request.stat_test.dist_threshold == 0.0
    with pytest.raises(TypeError, match="nonce 3"):
        validate_poc_request(
            block_hash="h",
            public_key="k",
            model="m",
            seq_len=64,
            claims=[(3, [1.0])],
            dist_threshold=0.2,
            p_mismatch=0.1,
            p_value_threshold=0.05,
        )
    with pytest.raises(TypeError):
        validate_poc_request(
            block_hash="h", public_key="k", model="m", seq_len=64, claims=[], dist_threshold=0.2, p_mismatch=0.1
        )  # type: ignore[call-arg]


# --- resuming a subscription ------------------------------------------------------------------


def dropped(reason: str | None = None) -> ServerError:
    return ServerError(grpc.StatusCode.UNAVAILABLE, "Socket closed", reason=reason)


def test_the_cursor_resumes_after_the_last_batch_on_the_same_round() -> None:
    cursor = SubscriptionCursor(None, 0, max_retries=2, retry_delay=0.5)
    cursor.saw(poc_pb2.SubscribeArtifactsResponse(round_id="r1", batch=poc_pb2.ArtifactBatch(sequence=7)))
    assert (cursor.round_id, cursor.after_sequence) == ("r1", 7)
    # Past a lost range, so a resume is not told of the same loss again.
    cursor.saw(
        poc_pb2.SubscribeArtifactsResponse(
            round_id="r1", lost=poc_pb2.ArtifactsLost(first_missing_sequence=8, last_missing_sequence=12)
        )
    )
    assert cursor.after_sequence == 12


def test_retries_are_bounded_per_outage_and_only_for_dropped_connections() -> None:
    attempts: list[int] = []
    cursor = SubscriptionCursor(
        "r1", 0, max_retries=2, retry_delay=0.5, on_retry=lambda error, attempt: attempts.append(attempt)
    )
    assert [cursor.retry_delay(dropped()), cursor.retry_delay(ended_without_end())] == [0.5, 1.0]
    with pytest.raises(ServerError):
        cursor.retry_delay(dropped())
    cursor.saw(poc_pb2.SubscribeArtifactsResponse(round_id="r1", batch=poc_pb2.ArtifactBatch(sequence=1)))
    assert cursor.retry_delay(dropped()) == 0.5  # a message in between starts a new outage
    assert attempts == [1, 2, 1]
    for error in (
        dropped("SHUTTING_DOWN"),
        ServerError(grpc.StatusCode.NOT_FOUND, "no round", reason="ROUND_NOT_FOUND"),
    ):
        with pytest.raises(ServerError) as raised:
            cursor.retry_delay(error)
        assert raised.value is error


# --- CLI arguments ----------------------------------------------------------------------------

ARTIFACT_FLAGS = ["--block-hash", "h", "--public-key", "k", "--seq-len", "64"]
THRESHOLDS = ["--dist-threshold", "0.02", "--p-mismatch", "0.1", "--p-value-threshold", "0.05"]


def test_round_commands_parse_with_server_defaults_left_unset() -> None:
    parser = build_parser()
    args = parser.parse_args(
        ["--target", "node:1", "round", "start", *ARTIFACT_FLAGS, "--node-id", "1", "--node-count", "3", "--json"]
    )
    assert (
        args.command,
        args.round_action,
        args.block_hash,
        args.seq_len,
        args.node_id,
        args.node_count,
        args.json,
    ) == ("round", "start", "h", 64, 1, 3, True)
    assert (args.model, args.k_dim, args.batch_size, args.group_count) == (None, None, None, None)
    args = parser.parse_args(["round", "stop", "--round-id", "abc"])
    assert (args.round_action, args.round_id, args.json) == ("stop", "abc", False)
    assert parser.parse_args(["round", "status"]).round_id is None


def test_compute_takes_nonces_and_inclusive_ranges() -> None:
    args = build_parser().parse_args(["compute", *ARTIFACT_FLAGS, "--batch-size", "8", "3", "-2", "10..12"])
    assert [nonce for group in args.nonces for nonce in group] == [3, -2, 10, 11, 12]
    assert args.batch_size == 8 and wants_progress(args)


@pytest.mark.parametrize(
    "argv",
    [
        ["compute", *ARTIFACT_FLAGS, "5..3"],
        ["compute", *ARTIFACT_FLAGS, "x"],
        ["compute", "--block-hash", "h", "--public-key", "k", "1"],  # no --seq-len
        ["round", "start", "--block-hash", "h", "--seq-len", "64"],  # no --public-key
        ["subscribe", "--after-sequence", "-1"],
        ["round"],
    ],
)
def test_bad_poc_arguments_are_usage_errors(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(argv)
    assert exit_info.value.code == 2
    assert "error:" in capsys.readouterr().err


def test_validate_poc_reads_claims_from_a_file_or_stdin(
    tmp_path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pairs = [(4, "AQI="), (10, "AwQ=")]
    path = tmp_path / "claims.json"
    path.write_text(json.dumps(claims_to_json(pairs)))
    parser = build_parser()
    args = parser.parse_args(["validate-poc", str(path), *ARTIFACT_FLAGS, *THRESHOLDS, "--json"])
    assert args.claims == pairs and (args.dist_threshold, args.p_mismatch, args.p_value_threshold) == (0.02, 0.1, 0.05)
    assert not wants_progress(args) and wants_progress(
        parser.parse_args(["validate-poc", str(path), *ARTIFACT_FLAGS, *THRESHOLDS, "--json", "--progress"])
    )
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(claims_to_json(pairs[:1]))))
    assert parser.parse_args(["validate-poc", *ARTIFACT_FLAGS, *THRESHOLDS]).claims == pairs[:1]
    for argv in (
        ["validate-poc", str(path), *ARTIFACT_FLAGS],
        ["validate-poc", str(tmp_path / "missing.json"), *ARTIFACT_FLAGS, *THRESHOLDS],
    ):
        with pytest.raises(SystemExit):
            parser.parse_args(argv)
    assert "cannot read" in capsys.readouterr().err


# --- progress line ----------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_into_a_log_is_throttled_and_its_rate_counts_from_the_start() -> None:
    clock, stream = Clock(), io.StringIO()
    progress = Progress(stream, log_interval=1.0, clock=clock)
    clock.now += 2.0
    assert progress.rate(10) == 5.0
    progress.show("a")
    progress.show("b")  # too soon: dropped
    clock.now += 1.0
    progress.show("c")
    progress.show("d", final=True)  # the final line always shows
    assert stream.getvalue() == "a\nc\nd\n"
    quiet = io.StringIO()
    Progress(quiet, enabled=False).show("x", final=True)
    assert quiet.getvalue() == ""


def test_progress_on_a_terminal_rewrites_one_line_and_clears_it_for_other_output() -> None:
    clock, terminal = Clock(), Terminal()
    progress = Progress(terminal, tty_interval=0.2, clock=clock)
    progress.show("1 batch")
    progress.clear()
    clock.now += 0.5
    progress.show("2 batches", final=True)
    progress.clear()  # nothing on screen after a final line
    assert terminal.getvalue() == f"{CLEAR_LINE}1 batch{CLEAR_LINE}{CLEAR_LINE}2 batches\n"
