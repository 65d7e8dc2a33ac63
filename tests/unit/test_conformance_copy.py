"""The in-repo conformance vectors (tests/data/conformance) against their source, ../shared/conformance,
and against the SHA-256 list in their README."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

from .consensus.conformance import CONFORMANCE_DIR, REPO_ROOT

SHARED_DIR = REPO_ROOT.parent / "shared" / "conformance"
README_ROW = re.compile(r"^\| `([^`]+)` \| `([0-9a-f]{64})` \|$", re.MULTILINE)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def copy_problems(source_dir: Path, copy_dir: Path) -> list[str]:
    """One line per file of source_dir that has no identical copy in copy_dir."""
    problems = []
    for source in sorted(p for p in source_dir.rglob("*") if p.is_file()):
        name = source.relative_to(source_dir)
        copy = copy_dir / name
        if not copy.is_file():
            problems.append(f"{name}: in {source_dir} but has no copy in {copy_dir}")
        elif copy.read_bytes() != source.read_bytes():
            problems.append(f"{name}: the copy has drifted (sha256 {sha256(copy)}, source {sha256(source)})")
    return problems


def test_every_shared_vector_file_has_a_byte_identical_copy() -> None:
    if not SHARED_DIR.is_dir():
        pytest.skip(f"{SHARED_DIR} is absent: nothing to compare the in-repo copy with")
    problems = copy_problems(SHARED_DIR, CONFORMANCE_DIR)
    assert not problems, (
        "tests/data/conformance no longer matches ../shared/conformance; copy the files again and update "
        "the hashes and date in tests/data/conformance/README.md:\n  " + "\n  ".join(problems)
    )


def test_readme_records_the_sha256_of_every_copied_file() -> None:
    recorded = dict(README_ROW.findall((CONFORMANCE_DIR / "README.md").read_text(encoding="utf-8")))
    present = {p.name: sha256(p) for p in CONFORMANCE_DIR.iterdir() if p.is_file() and p.name != "README.md"}
    assert present, f"no vector files in {CONFORMANCE_DIR}"
    assert recorded == present, "tests/data/conformance/README.md's SHA-256 table does not match the files there"


def test_copy_problems_reports_drift_and_missing_copies(tmp_path: Path) -> None:
    source, copy = tmp_path / "source", tmp_path / "copy"
    source.mkdir()
    copy.mkdir()
    (source / "same.json").write_bytes(b"{}")
    (copy / "same.json").write_bytes(b"{}")
    assert copy_problems(source, copy) == []

    (source / "drifted.json").write_bytes(b'{"a": 1}')
    (copy / "drifted.json").write_bytes(b'{"a": 2}')
    (source / "new.json").write_bytes(b"[]")
    problems = copy_problems(source, copy)
    assert len(problems) == 2
    assert problems[0].startswith("drifted.json: the copy has drifted")
    assert problems[1].startswith("new.json: in ")
