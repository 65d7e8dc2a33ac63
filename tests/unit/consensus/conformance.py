"""The conformance vectors: the in-repo copy of ../shared/conformance (tests/data/conformance)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[3]
# In the repository, so that a clone without ../shared runs the suite; test_conformance_copy.py
# checks it against ../shared/conformance when that is present.
CONFORMANCE_DIR = REPO_ROOT / "tests" / "data" / "conformance"


def load_conformance(name: str) -> dict[str, Any]:
    path = CONFORMANCE_DIR / name
    if not path.is_file():
        # Fail, never skip: without the vectors these tests would prove nothing.
        pytest.fail(f"conformance file missing: {path}", pytrace=False)
    return json.loads(path.read_text(encoding="utf-8"))
