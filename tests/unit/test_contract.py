"""The contract (protos/): buf lint, the breaking-change check against the previous commit with its
declarations (protos/BREAKING_CHANGES.toml), and the contract revision record.

Which commit is "previous" is protos/contract_base.py's rule: HEAD when the working tree's .proto
files differ from HEAD's (a developer's uncommitted change), else HEAD~1 (CI, where HEAD is the
commit under test); the repository's first commit has no previous contract; a shallow clone without
HEAD~1 fails, saying to deepen it. buf comes from the pinned npm package `make test` installs; a
missing buf or git fails these tests, never skips them.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2

from gonka.mlnode import contract as record_module
from gonka.mlnode.contract import descriptor_digest, stub_digest
from gonka.mlnode.v1 import errors_pb2, inference_pb2
from protos import buf_tool
from protos.breaking import Declaration, check, declared_breaks, entry_for, judge
from protos.buf_tool import PROTOS, BufMissing
from protos.contract import RECORD_PATH, Record, previous_record, problems, read_record, rewritten, write_record
from protos.contract_base import Base, ContractBaseError, previous_contract

REPO_ROOT = PROTOS.parent
# The stubs' generator's own virtualenv (`make codegen`, requirements/codegen.txt).
CODEGEN_PYTHON = REPO_ROOT / ".build" / "codegen" / "bin" / "python"
INFERENCE_PROTO = "gonka/mlnode/v1/inference.proto"
CONTRACT_FILES = ("gonka", "buf.yaml")


@pytest.fixture(scope="module")
def buf() -> None:
    """Fails (never skips) when buf is absent or not the pinned version."""
    try:
        installed = buf_tool.installed_version()
    except BufMissing as error:
        pytest.fail(str(error))
    assert installed == buf_tool.pinned_version(), (
        f"buf {installed} is installed, requirements/buf pins {buf_tool.pinned_version()}: run `make buf`"
    )


def copy_of_module(destination: Path) -> Path:
    """The working tree's module (protos and buf.yaml) under `destination`, for edits in a test."""
    for name in CONTRACT_FILES:
        source = PROTOS / name
        (shutil.copytree if source.is_dir() else shutil.copy)(source, destination / name)
    return destination


def edit(module: Path, relative: str, old: str, new: str) -> None:
    path = module / relative
    text = path.read_text()
    assert text.count(old) == 1, f"{relative} no longer holds {old!r} once: update this test"
    path.write_text(text.replace(old, new))


# buf lint


def test_buf_lint_passes(buf: None) -> None:
    findings = buf_tool.lint()
    assert not findings, "buf lint (protos/buf.yaml):\n" + "\n".join(
        f"{f.path}:{f.line}: {f.rule}: {f.message}" for f in findings
    )


def test_buf_lint_requires_a_comment_on_every_field(buf: None, tmp_path: Path) -> None:
    module = copy_of_module(tmp_path)
    edit(module, INFERENCE_PROTO, "message TokenIds {\n", "message TokenIds {\n  uint32 undocumented = 99;\n")
    assert [(f.rule, f.path) for f in buf_tool.lint(module)] == [("COMMENT_FIELD", INFERENCE_PROTO)]


# Breaking changes


def test_every_breaking_change_against_the_previous_commit_is_declared(buf: None) -> None:
    try:
        verdict = check()
    except ContractBaseError as error:
        pytest.fail(str(error))
    assert verdict.passed, verdict.report()


def test_a_deleted_field_is_reported_and_passes_only_once_declared(buf: None, tmp_path: Path) -> None:
    # The "previous" contract had one more field in TokenIds: the working tree's deleted it.
    previous = copy_of_module(tmp_path / "previous")
    edit(previous, INFERENCE_PROTO, "message TokenIds {\n", "message TokenIds {\n  uint32 dropped = 2;\n")
    findings = buf_tool.breaking(against=previous)
    assert [(f.rule, f.path) for f in findings] == [("FIELD_NO_DELETE", INFERENCE_PROTO)]

    base = Base(REPO_ROOT, "0" * 40, "a test")
    undeclared = judge(base, findings, [])
    assert not undeclared.passed and "FIELD_NO_DELETE" in undeclared.report()
    (declared,) = declarations_from(
        entry_for(findings[0]).replace('reason = ""', 'reason = "no client sets it"'), tmp_path
    )
    assert judge(base, findings, [declared]).passed
    # A declaration whose break is not reported (an earlier commit's) fails the check too.
    stale = judge(base, [], [declared])
    assert stale.stale == [declared] and not stale.passed


def test_a_declaration_needs_every_key_and_a_reason(tmp_path: Path) -> None:
    entry = '[[break]]\nrule = "FIELD_NO_DELETE"\nfile = "a.proto"\nmessage = "m"\nreason = ""\n'
    with pytest.raises(ValueError, match="non-empty"):
        declarations_from(entry, tmp_path)
    with pytest.raises(ValueError, match="exactly"):
        declarations_from(entry.replace('reason = ""\n', ""), tmp_path)


def declarations_from(text: str, tmp_path: Path) -> list[Declaration]:
    path = tmp_path / "BREAKING_CHANGES.toml"
    path.write_text(text)
    return declared_breaks(path)


# Which commit is the previous contract


def git(repo: Path, *args: str) -> str:
    identity = ("-c", "user.name=test", "-c", "user.email=test@example.invalid", "-c", "commit.gpgsign=false")
    return subprocess.run(
        ["git", *identity, "-C", str(repo), *args], capture_output=True, text=True, check=True
    ).stdout.strip()


def repository(tmp_path: Path, commits: int) -> Path:
    """A repository whose every commit changes protos/a.proto."""
    repo = tmp_path / "repo"
    (repo / "protos").mkdir(parents=True)
    git(repo, "init", "-q")
    for number in range(commits):
        (repo / "protos" / "a.proto").write_text(f'syntax = "proto3";\n// {number}\n')
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", f"commit {number}")
    return repo


def test_a_clean_tree_is_compared_with_the_parent_of_head(tmp_path: Path) -> None:
    repo = repository(tmp_path, 2)
    (repo / "README").write_text("not a proto: does not count\n")
    assert previous_contract(repo).commit == git(repo, "rev-parse", "HEAD~1")


@pytest.mark.parametrize("change", ["edited", "added", "deleted"])
def test_uncommitted_proto_changes_are_compared_with_head(tmp_path: Path, change: str) -> None:
    repo = repository(tmp_path, 2)
    protos = repo / "protos"
    if change == "edited":
        (protos / "a.proto").write_text('syntax = "proto3";\n')
    elif change == "added":
        (protos / "nested").mkdir()
        (protos / "nested" / "b.proto").write_text('syntax = "proto3";\n')
    else:
        (protos / "a.proto").unlink()
    assert previous_contract(repo).commit == git(repo, "rev-parse", "HEAD")


def test_the_first_commit_has_no_previous_contract(tmp_path: Path) -> None:
    assert previous_contract(repository(tmp_path, 1)) is None


def test_a_shallow_clone_without_the_parent_fails_saying_what_to_do(tmp_path: Path) -> None:
    origin = repository(tmp_path, 2)
    clone = tmp_path / "clone"
    subprocess.run(
        ["git", "clone", "-q", "--depth", "1", f"file://{origin}", str(clone)], check=True, capture_output=True
    )
    with pytest.raises(ContractBaseError, match="shallow clone.*git fetch --deepen=1"):
        previous_contract(clone)


def test_a_directory_without_commits_fails(tmp_path: Path) -> None:
    with pytest.raises(ContractBaseError, match="no commit"):
        previous_contract(tmp_path)


# The contract revision record


def test_the_record_matches_the_stubs_and_the_previous_commit() -> None:
    if not CODEGEN_PYTHON.is_file():
        pytest.fail(f"the stubs' generator is not installed at {CODEGEN_PYTHON.parent.parent}: run `make codegen`")
    stale = subprocess.run([str(CODEGEN_PYTHON), str(PROTOS / "codegen.py"), "--check"], capture_output=True, text=True)
    assert stale.returncode == 0, f"{stale.stderr}(`make contract` regenerates the stubs and rewrites the record)"
    current = read_record((REPO_ROOT / RECORD_PATH).read_text())
    digest = stub_digest()
    try:
        previous = previous_record()
    except ContractBaseError as error:
        pytest.fail(str(error))
    found = problems(current, digest, previous)
    expected = rewritten(current, digest, previous)
    assert not found, (
        "\n".join(found) + f"\nRun `make contract`, or write in {RECORD_PATH}:\n"
        f'REVISION = {expected.revision}\nDIGEST = "{expected.digest}"'
    )
    # The server reports the constants the module holds.
    assert (record_module.REVISION, record_module.DIGEST) == (current.revision, current.digest)


OLD = Record(4, "sha256:" + "a" * 64)
NEW_DIGEST = "sha256:" + "b" * 64


@pytest.mark.parametrize(
    ("current", "digest", "previous", "complaint"),
    [
        (Record(4, OLD.digest), NEW_DIGEST, OLD, "DIGEST is"),  # protos changed, nothing rewritten
        (Record(4, NEW_DIGEST), NEW_DIGEST, OLD, "contract changed"),  # digest rewritten, revision not bumped
        (Record(5, OLD.digest), OLD.digest, OLD, "equals the previous"),  # bumped without a change
        (Record(0, NEW_DIGEST), NEW_DIGEST, None, "start at 1"),
    ],
)
def test_a_stale_record_is_refused(current: Record, digest: str, previous: Record | None, complaint: str) -> None:
    found = problems(current, digest, previous)
    assert any(complaint in message for message in found), found


@pytest.mark.parametrize(
    ("current", "digest", "previous", "written"),
    [
        (OLD, NEW_DIGEST, OLD, Record(5, NEW_DIGEST)),
        (Record(5, NEW_DIGEST), NEW_DIGEST, OLD, Record(5, NEW_DIGEST)),  # running make contract twice
        (Record(5, NEW_DIGEST), OLD.digest, OLD, OLD),  # the change was undone
        (Record(1, OLD.digest), NEW_DIGEST, None, Record(1, NEW_DIGEST)),  # the first record
    ],
)
def test_make_contract_writes_a_record_the_check_accepts(
    current: Record, digest: str, previous: Record | None, written: Record
) -> None:
    assert rewritten(current, digest, previous) == written
    assert problems(written, digest, previous) == []


def test_the_record_is_rewritten_in_place(tmp_path: Path) -> None:
    path = tmp_path / "contract.py"
    original = (REPO_ROOT / RECORD_PATH).read_text()
    path.write_text(original)
    write_record(path, Record(77, NEW_DIGEST))
    assert read_record(path.read_text()) == Record(77, NEW_DIGEST)
    untouched = [line for line in original.splitlines() if not line.startswith(("REVISION = ", "DIGEST = "))]
    assert [
        line for line in path.read_text().splitlines() if not line.startswith(("REVISION = ", "DIGEST = "))
    ] == untouched


def test_the_digest_follows_the_descriptors_not_their_order() -> None:
    files = [module.DESCRIPTOR.serialized_pb for module in (errors_pb2, inference_pb2)]
    assert descriptor_digest(files) == descriptor_digest(reversed(files))
    changed = descriptor_pb2.FileDescriptorProto.FromString(files[1])
    changed.message_type[0].field[0].number = 99
    assert descriptor_digest([files[0], changed.SerializeToString()]) != descriptor_digest(files)
    assert stub_digest().startswith("sha256:") and len(stub_digest()) == len("sha256:") + 64
