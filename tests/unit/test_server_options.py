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
        "--max-request-mb", "3", "--max-prompt-chars", "5000", "--engine-call-timeout", "2.5", "--engine-stuck-after", "9"
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
