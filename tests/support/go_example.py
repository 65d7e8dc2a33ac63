"""The Go client's commands (its example, the API node's management client), built once per test session (GOPATH
mode, offline, as `make go-check` builds them)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.server_process import REPO_ROOT

GOPATH_GO = REPO_ROOT / "clients" / "go" / "gopath.sh"


def build_go_example(folder: Path) -> Path:
    return build_go_command(folder, "mlnode-example")


def build_go_command(folder: Path, name: str) -> Path:
    """clients/go/cmd/`name`, built into `folder`."""
    binary = folder / name
    build = subprocess.run(
        [str(GOPATH_GO), "build", "-o", str(binary), f"./cmd/{name}"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if build.returncode != 0:
        pytest.fail(
            f"building the Go command {name} failed (`make go-setup` installs the Go toolchain):\n{build.stderr}"
        )
    return binary
