"""The server's own flags, read without vLLM: defaults, units, validation, and vLLM's flags left alone."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from server.options import ServerOptions, parse_server_flags, server_help

REPO_ROOT = Path(__file__).resolve().parents[2]
PROG = "python -m server"


def options(*argv: str) -> ServerOptions:
    return ServerOptions.from_args(parse_server_flags(PROG, list(argv)))


def test_defaults() -> None:
    assert options() == ServerOptions(
        host="127.0.0.1",
        port=50051,
        shutdown_grace_seconds=5.0,
        max_request_bytes=16 * 1024 * 1024,
        max_prompt_chars=None,
        engine_call_timeout_seconds=30.0,
        engine_stuck_seconds=120.0,
    )


def test_given_values_in_their_units() -> None:
    given = options(
        "--max-request-mb",
        "3",
        "--max-prompt-chars",
        "5000",
        "--engine-call-timeout",
        "2.5",
        "--engine-stuck-after",
        "9",
    )
    assert given.max_request_bytes == 3 * 1024 * 1024
    assert given.max_prompt_chars == 5000
    assert given.engine_call_timeout_seconds == 2.5
    assert given.engine_stuck_seconds == 9.0


def test_vllm_flags_are_left_for_vllms_parser() -> None:
    given = options("--max-model-len", "-1", "--port", "6000", "--tensor-parallel-size", "2", "--host=::1")
    assert (given.host, given.port, given.address) == ("::1", 6000, "[::1]:6000")


def test_an_abbreviation_is_not_taken_for_a_server_flag() -> None:
    # vLLM's parser decides what `--po` means; this early look must not guess.
    assert options("--po", "6000").port == 50051


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--max-request-mb", "0", "argument --max-request-mb: must be positive, got '0'"),
        ("--max-request-mb", "1.5", "argument --max-request-mb: invalid int value: '1.5'"),
        ("--max-prompt-chars", "-3", "argument --max-prompt-chars: must be positive, got '-3'"),
        ("--engine-call-timeout", "0", "argument --engine-call-timeout: must be positive, got '0'"),
        ("--engine-stuck-after", "nan", "argument --engine-stuck-after: must be positive, got 'nan'"),
        ("--engine-stuck-after", "soon", "argument --engine-stuck-after: invalid float value: 'soon'"),
    ],
)
def test_bad_values_exit_2_with_a_message(flag: str, value: str, message: str, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exited:
        options(flag, value)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_the_server_group_help_states_defaults_and_units() -> None:
    text = server_help(PROG)
    assert text.startswith("server:\n")
    for fragment in (
        "--shutdown-grace SECONDS",
        "default: 50051",
        "--max-request-mb MIB",
        "in MiB",
        "(default: 16)",
        "16 characters per token of the model's context",
        "--engine-call-timeout SECONDS",
        "(default: 30.0)",
        "--engine-stuck-after SECONDS",
        "(default: 120.0)",
    ):
        assert fragment in " ".join(text.split()), fragment


def test_the_command_line_module_imports_no_engine() -> None:
    # vLLM's import takes about 10 s: the port check and `--help=server` must not wait for it.
    code = "import sys, server.cli; sys.exit('vllm' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, check=False).returncode == 0


def test_security_and_limit_flags() -> None:
    defaults = options()
    assert (defaults.tls_cert_file, defaults.auth_token_file, defaults.max_concurrent_streams) == (None, None, 1024)
    assert (
        defaults.keepalive_time_seconds,
        defaults.keepalive_timeout_seconds,
        defaults.keepalive_min_ping_interval_seconds,
    ) == (30.0, 10.0, 10.0)
    given = options(
        "--tls-cert",
        "c.pem",
        "--tls-key",
        "k.pem",
        "--tls-client-ca",
        "ca.pem",
        "--auth-token-file",
        "token",
        "--max-concurrent-streams",
        "0",
        "--keepalive-time",
        "1.5",
        "--keepalive-timeout",
        "2",
        "--keepalive-min-ping-interval",
        "3",
    )
    assert (given.tls_cert_file, given.tls_key_file, given.tls_client_ca_file, given.auth_token_file) == (
        "c.pem",
        "k.pem",
        "ca.pem",
        "token",
    )
    assert given.max_concurrent_streams == 0  # no bound
    assert (
        given.keepalive_time_seconds,
        given.keepalive_timeout_seconds,
        given.keepalive_min_ping_interval_seconds,
    ) == (1.5, 2.0, 3.0)


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--max-concurrent-streams", "-1", "argument --max-concurrent-streams: must be 0 or more, got '-1'"),
        ("--keepalive-time", "0", "argument --keepalive-time: must be positive, got '0'"),
        ("--keepalive-min-ping-interval", "-2", "argument --keepalive-min-ping-interval: must be positive, got '-2'"),
    ],
)
def test_bad_limit_values_exit_2(flag: str, value: str, message: str, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exited:
        options(flag, value)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("argv", [("--auth-token", "s3cret-value"), ("--auth-token=s3cret-value",), ("--auth-token",)])
def test_a_token_on_the_command_line_is_refused_without_being_repeated(
    argv: tuple[str, ...], capsys: pytest.CaptureFixture
) -> None:
    with pytest.raises(SystemExit) as exited:
        options(*argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "--auth-token is refused" in err and "--auth-token-file" in err and "MLNODE_AUTH_TOKEN" in err
    assert "s3cret-value" not in err
