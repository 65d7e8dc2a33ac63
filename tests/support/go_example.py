"""The Go client's example command, built once per test session (GOPATH mode, offline, as
`make go-check` builds it)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.server_process import REPO_ROOT

GOPATH_GO = REPO_ROOT / "clients" / "go" / "gopath.sh"


def build_go_example(folder: Path) -> Path:
    binary = folder / "mlnode-example"
    build = subprocess.run(
        [str(GOPATH_GO), "build", "-o", str(binary), "./cmd/mlnode-example"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if build.returncode != 0:
        pytest.fail(f"building the Go example failed (`make go-setup` installs the Go toolchain):\n{build.stderr}")
    return binary
