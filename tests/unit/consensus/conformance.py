"""The conformance vectors of ../shared/conformance (beside the repository root)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[3]
CONFORMANCE_DIR = REPO_ROOT.parent / "shared" / "conformance"


def load_conformance(name: str) -> dict[str, Any]:
    path = CONFORMANCE_DIR / name
    if not path.is_file():
        # Fail, never skip: without the vectors these tests would prove nothing.
        pytest.fail(f"conformance file missing: {path}", pytrace=False)
    return json.loads(path.read_text(encoding="utf-8"))
