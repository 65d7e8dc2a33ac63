"""Print a pip constraints file (name==version, sorted) from the JSON of
`pip install --dry-run --ignore-installed --report FILE ...`.

`make lock` uses it for the GPU engine: the dry run resolves the whole stack from the registries'
metadata, so the lock needs no multi-GB CUDA install. Local directories (this project, which setup
installs editable) are left out, as `pip freeze --exclude-editable` leaves them out of the CPU lock.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def pins(report: dict[str, Any]) -> list[str]:
    versions = {
        item["metadata"]["name"]: item["metadata"]["version"]
        for item in report["install"]
        if "dir_info" not in item["download_info"]
    }
    # By name, as pip freeze orders the CPU file (not by line: "grpcio-tools" would precede "grpcio==").
    return [f"{name}=={versions[name]}" for name in sorted(versions, key=str.lower)]


def main() -> None:
    if len(sys.argv) != 2:
        raise SystemExit("usage: report_to_constraints.py REPORT.json")
    report = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
    print("\n".join(pins(report)))


if __name__ == "__main__":
    main()
