"""Runs buf (the pinned npm package the Makefile installs into .build/buf) on the contract."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

PROTOS = Path(__file__).resolve().parent
REPO_ROOT = PROTOS.parent
BUF = REPO_ROOT / ".build" / "buf" / "node_modules" / ".bin" / "buf"
PINNED_PACKAGE = REPO_ROOT / "requirements" / "buf" / "package.json"
# buf's exit status when it found problems (lint issues, breaking changes), as opposed to failing.
FOUND_PROBLEMS = 100


class BufMissing(Exception):
    """buf is not installed where the Makefile puts it."""


@dataclass(frozen=True)
class Finding:
    """One problem buf reported; `path` is relative to protos/ (e.g. gonka/mlnode/v1/inference.proto)."""

    rule: str
    path: str
    line: int
    message: str


def pinned_version() -> str:
    return json.loads(PINNED_PACKAGE.read_text())["dependencies"]["@bufbuild/buf"]


def lint(module: Path = PROTOS) -> list[Finding]:
    """What buf's lint rules (the module's buf.yaml) report on the module (a copy in tests)."""
    return _findings(_run(["lint", ".", "--error-format=json"], module))


def breaking(against: Path, module: Path = PROTOS) -> list[Finding]:
    """What buf's breaking rules (the module's buf.yaml) report for the module's protos against the
    protos/ directory `against`."""
    return _findings(_run(["breaking", ".", "--error-format=json", "--against", str(against)], module))


def installed_version() -> str:
    return _run(["--version"], PROTOS).strip()


def _run(args: list[str], module: Path) -> str:
    if not BUF.is_file():
        raise BufMissing(
            f"buf is not installed at {BUF.relative_to(REPO_ROOT)}: run `make buf` (make test installs it; it needs npm)"
        )
    # From the module's directory, with "." as input: the paths buf reports are relative to it.
    done = subprocess.run([str(BUF), *args], cwd=module, capture_output=True, text=True)
    if done.returncode not in (0, FOUND_PROBLEMS):
        raise RuntimeError(f"`buf {' '.join(args)}` failed (exit code {done.returncode}):\n{done.stderr}{done.stdout}")
    return done.stdout


def _findings(output: str) -> list[Finding]:
    findings = []
    for line in output.splitlines():
        record = json.loads(line)
        findings.append(Finding(record["type"], record["path"], record.get("start_line", 0), record["message"]))
    return findings
