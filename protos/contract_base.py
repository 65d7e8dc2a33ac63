"""Which commit holds the previous contract, and its files: what the breaking-change check and the
contract revision compare the working tree against.

The rule, for a developer and for CI alike: the change under test is the last change to the
contract (the *.proto files under protos/).
- The working tree's protos differ from HEAD's (uncommitted edits, new or deleted .proto files
  included): those edits are the change; the base is HEAD.
- They equal HEAD's: the change is HEAD's own commit, as in CI, where the checkout is a fresh clone
  of main whose HEAD is the commit being tested; the base is HEAD~1, its first parent (for a merge
  commit: main before the merge).
Every commit is compared with its parent when it is tested as HEAD; where CI tests only the last
commit of a push, the commits before it in that push are not compared one by one.

Where there is no parent to compare with:
- HEAD is the repository's first commit: there is no previous contract, so nothing can break and
  any revision starts the count (base None).
- A shallow clone that lacks HEAD~1, no git, or no commit at all: ContractBaseError, with what to do.
  The checks never pass without having compared.
"""

from __future__ import annotations

import io
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
PROTO_FILES = ":(glob)protos/**/*.proto"


class ContractBaseError(Exception):
    """The previous contract cannot be determined; the message says why and what to do."""


@dataclass(frozen=True)
class Base:
    repo: Path
    commit: str
    # Why this commit: shown in failure messages, so a developer sees what was compared.
    why: str


def previous_contract(repo: Path = REPO_ROOT) -> Base | None:
    """The commit holding the previous contract (None: HEAD is the first commit; see the module doc)."""
    head = _git(repo, "rev-parse", "--verify", "--quiet", "HEAD^{commit}", check=False)
    if not head:
        raise ContractBaseError(
            f"{repo} has no commit (or is not a git checkout): the contract checks compare with the previous commit"
        )
    if _git(repo, "status", "--porcelain", "--untracked-files=all", "--", PROTO_FILES):
        return Base(repo, head, "HEAD: the working tree's protos differ from it")
    parent = _git(repo, "rev-parse", "--verify", "--quiet", "HEAD~1^{commit}", check=False)
    if parent:
        return Base(repo, parent, "HEAD~1: the working tree's protos equal HEAD's, so HEAD's own commit is the change")
    if _git(repo, "rev-parse", "--is-shallow-repository") == "true":
        raise ContractBaseError(
            "this is a shallow clone without HEAD's parent, which the contract checks compare with: "
            "run `git fetch --deepen=1` (in CI, clone with a depth of at least 2)"
        )
    return None


def extract_protos(base: Base, destination: Path) -> Path:
    """Writes the base commit's protos/ under `destination`; returns that protos/ directory."""
    archive = subprocess.run(
        ["git", "-C", str(base.repo), "archive", "--format=tar", base.commit, "protos"], capture_output=True
    )
    if archive.returncode != 0:
        raise ContractBaseError(
            f"cannot read protos/ at {base.commit}: {archive.stderr.decode(errors='replace').strip()}"
        )
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(destination, filter="data")
    return destination / "protos"


def file_at(base: Base, path: str) -> str | None:
    """The text of `path` (relative to the repository) at the base commit; None where it is absent."""
    # ls-tree first: `git show` fails alike for an absent path and for a broken repository.
    if not _git(base.repo, "ls-tree", "--name-only", base.commit, "--", path):
        return None
    return _git(base.repo, "show", f"{base.commit}:{path}", strip=False)


def _git(repo: Path, *args: str, check: bool = True, strip: bool = True) -> str:
    try:
        done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=check)
    except FileNotFoundError as error:
        raise ContractBaseError("git is not installed: the contract checks compare with the previous commit") from error
    except subprocess.CalledProcessError as error:
        raise ContractBaseError(f"`git {' '.join(args)}` failed: {error.stderr.strip()}") from error
    return done.stdout.strip() if strip else done.stdout
