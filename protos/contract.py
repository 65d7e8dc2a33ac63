"""The contract's record (REVISION and DIGEST in clients/python/gonka/mlnode/contract.py): what it
must say, and `python -m protos.contract` (make contract, after make proto) to write it.

The rules, against the previous contract's record (protos/contract_base.py says which commit):
- DIGEST is the digest of the stubs (gonka.mlnode.contract.stub_digest; the stubs must be fresh).
- The same digest as the previous record: the same revision. Another digest: a greater revision
  (make contract writes the previous one plus one).
- No previous record (HEAD is the first commit, or the previous commit predates the record): any
  revision from 1 starts the count.
"""

from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from gonka.mlnode.contract import stub_digest
from protos.contract_base import REPO_ROOT, ContractBaseError, file_at, previous_contract

RECORD_PATH = "clients/python/gonka/mlnode/contract.py"


@dataclass(frozen=True)
class Record:
    revision: int
    digest: str


def read_record(source: str) -> Record:
    """REVISION and DIGEST of a record module's source (the working tree's, or an older commit's)."""
    values = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            if node.targets[0].id in ("REVISION", "DIGEST"):
                values[node.targets[0].id] = ast.literal_eval(node.value)
    return Record(values["REVISION"], values["DIGEST"])


def previous_record() -> Record | None:
    base = previous_contract()
    source = None if base is None else file_at(base, RECORD_PATH)
    return None if source is None else read_record(source)


def problems(current: Record, digest: str, previous: Record | None) -> list[str]:
    """Why `current` is not the right record for stubs of `digest` (empty: it is)."""
    found = []
    if current.digest != digest:
        found.append(f"DIGEST is {current.digest}, but the stubs' digest is {digest}: the contract changed")
    if previous is None:
        if current.revision < 1:
            found.append(f"REVISION is {current.revision}; revisions start at 1")
    elif digest == previous.digest and current.revision != previous.revision:
        found.append(
            f"REVISION is {current.revision}, but the contract equals the previous commit's (revision {previous.revision})"
        )
    elif digest != previous.digest and current.revision <= previous.revision:
        found.append(
            f"REVISION is {current.revision}, but the contract changed since the previous commit's revision {previous.revision}"
        )
    return found


def rewritten(current: Record, digest: str, previous: Record | None) -> Record:
    if previous is None:
        return Record(max(current.revision, 1), digest)
    if digest == previous.digest:
        return Record(previous.revision, digest)
    return Record(previous.revision + 1, digest)


def write_record(path: Path, record: Record) -> None:
    text = path.read_text()
    for pattern, value in (
        (r"^REVISION = \d+$", f"REVISION = {record.revision}"),
        (r'^DIGEST = "sha256:[0-9a-f]{64}"$', f'DIGEST = "{record.digest}"'),
    ):
        text, count = re.subn(pattern, value, text, flags=re.MULTILINE)
        if count != 1:
            raise ValueError(f"{path}: expected one line matching {pattern}, found {count}")
    path.write_text(text)


def main() -> int:
    path = REPO_ROOT / RECORD_PATH
    current = read_record(path.read_text())
    try:
        previous = previous_record()
    except ContractBaseError as error:
        print(f"contract: {error}", file=sys.stderr)
        return 2
    record = rewritten(current, stub_digest(), previous)
    if record != current:
        write_record(path, record)
    print(
        f"{RECORD_PATH}: contract revision {record.revision}, {record.digest}{' (unchanged)' if record == current else ''}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
