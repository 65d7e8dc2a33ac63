"""Deliberate breaks of the contract: what buf's breaking rules report against the previous contract
(protos/contract_base.py says which commit), compared with protos/BREAKING_CHANGES.toml.

The check passes only when every reported break is declared there and every declaration is reported
(a declaration belongs to the one commit that makes its break). `python -m protos.breaking`
(make proto-breaking) prints the verdict; tests/unit/test_contract.py asserts it.
"""

from __future__ import annotations

import json
import sys
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path

from protos.buf_tool import PROTOS, BufMissing, Finding, breaking
from protos.contract_base import Base, ContractBaseError, extract_protos, previous_contract

DECLARATIONS = PROTOS / "BREAKING_CHANGES.toml"
DECLARATION_KEYS = ("rule", "file", "message", "reason")


@dataclass(frozen=True)
class Declaration:
    rule: str
    file: str
    message: str
    reason: str

    def matches(self, finding: Finding) -> bool:
        return (self.rule, self.file, self.message) == (finding.rule, finding.path, finding.message)


@dataclass(frozen=True)
class Verdict:
    # None: HEAD is the first commit, so there was no previous contract to break.
    base: Base | None
    undeclared: list[Finding]
    stale: list[Declaration]

    @property
    def passed(self) -> bool:
        return not self.undeclared and not self.stale

    def report(self) -> str:
        compared = (
            f"compared with {self.base.commit[:12]} ({self.base.why})"
            if self.base
            else "HEAD is the first commit: nothing to compare"
        )
        if self.passed:
            return f"contract: no undeclared breaking change ({compared})"
        lines = [f"contract: breaking-change check failed, {compared}"]
        if self.undeclared:
            lines += [
                "",
                f"{len(self.undeclared)} breaking change(s) not declared. If deliberate, add to protos/BREAKING_CHANGES.toml, "
                "with the reason clients can live with it:",
            ]
            lines += [entry_for(finding) for finding in self.undeclared]
        if self.stale:
            lines += [
                "",
                "declared in protos/BREAKING_CHANGES.toml but not reported (an earlier commit's, or fixed): remove",
            ]
            lines += [f"  {item.rule} {item.file}: {item.message}" for item in self.stale]
        return "\n".join(lines)


def declared_breaks(path: Path = DECLARATIONS) -> list[Declaration]:
    entries = tomllib.loads(path.read_text()).get("break", [])
    declarations = []
    for index, entry in enumerate(entries):
        if set(entry) != set(DECLARATION_KEYS) or not all(
            isinstance(entry[key], str) and entry[key].strip() for key in DECLARATION_KEYS
        ):
            raise ValueError(
                f"{path.name}: [[break]] entry {index} must set exactly {', '.join(DECLARATION_KEYS)}, each a non-empty string"
            )
        declarations.append(Declaration(**entry))
    return declarations


def check() -> Verdict:
    """The working tree's contract against the previous one, and BREAKING_CHANGES.toml."""
    base = previous_contract()
    findings: list[Finding] = []
    if base is not None:
        with tempfile.TemporaryDirectory() as scratch:
            findings = breaking(against=extract_protos(base, Path(scratch)))
    return judge(base, findings, declared_breaks())


def judge(base: Base | None, findings: list[Finding], declarations: list[Declaration]) -> Verdict:
    undeclared = [finding for finding in findings if not any(item.matches(finding) for item in declarations)]
    stale = [item for item in declarations if not any(item.matches(finding) for finding in findings)]
    return Verdict(base, undeclared, stale)


def entry_for(finding: Finding) -> str:
    """The BREAKING_CHANGES.toml entry declaring `finding`, its reason left for the developer."""
    # json.dumps writes a valid TOML basic string (buf's messages hold double quotes).
    fields = {"rule": finding.rule, "file": finding.path, "message": finding.message, "reason": ""}
    return "\n[[break]]\n" + "\n".join(f"{key} = {json.dumps(value)}" for key, value in fields.items())


def main() -> int:
    try:
        verdict = check()
    except (BufMissing, ContractBaseError, ValueError) as error:
        print(f"contract: {error}", file=sys.stderr)
        return 2
    print(verdict.report(), file=sys.stdout if verdict.passed else sys.stderr)
    return 0 if verdict.passed else 1


if __name__ == "__main__":
    sys.exit(main())
