"""The layering: vLLM's types stop at engine_ext (the server imports nothing from vllm, so a second vLLM version
touches engine_ext alone: the design's one-way data flow), and inside each top-level package no folder imports a folder
that imports it back (the folders are the parts docs/architecture.md draws; a two-way edge would make them one)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


# The packages whose folders are layered; benchmarks/ too, so a benchmark's helpers stay below its entry points.
LAYERED_PACKAGES = ("server", "engine_ext", "benchmarks")


def imported_modules(path: Path) -> set[str]:
    modules: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules.add(node.module)
    return modules


def folder_of(path: Path) -> str:
    return ".".join(path.parent.relative_to(REPO_ROOT).parts)


def imports_with_relative(path: Path) -> Iterator[str]:
    """Every module `path` imports, in a function body too, relative imports made absolute; `from a import b` also
    yields `a.b` (b may be a module)."""
    package = folder_of(path).split(".")
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            yield module
            yield from (f"{module}.{alias.name}" for alias in node.names)


def folder_edges(package: str) -> set[tuple[str, str]]:
    """(importing folder, imported folder) between different folders of `package`; a package's own `__init__`
    importing what is below it (its re-exports) aside."""
    files = {
        ".".join(path.relative_to(REPO_ROOT).with_suffix("").parts).removesuffix(".__init__"): path
        for path in (REPO_ROOT / package).rglob("*.py")
    }
    edges: set[tuple[str, str]] = set()
    for path in files.values():
        source = folder_of(path)
        for imported in imports_with_relative(path):
            module = imported
            while module and module not in files:
                module = module.rpartition(".")[0]
            if not module:
                continue
            target = folder_of(files[module])
            reexport = path.name == "__init__.py" and target.startswith(f"{source}.")
            if target != source and not reexport:
                edges.add((source, target))
    return edges


def two_way(edges: set[tuple[str, str]]) -> list[tuple[str, str]]:
    return sorted((a, b) for a, b in edges if (b, a) in edges and a < b)


def test_the_server_imports_nothing_from_vllm() -> None:
    offenders = {
        str(path.relative_to(REPO_ROOT)): sorted(
            module for module in imported_modules(path) if module.split(".")[0] == "vllm"
        )
        for path in sorted((REPO_ROOT / "server").rglob("*.py"))
    }
    assert {path: modules for path, modules in offenders.items() if modules} == {}
    assert len(offenders) > 10  # the scan really read the server's modules


def test_the_engine_extension_never_imports_the_server() -> None:
    for path in sorted((REPO_ROOT / "engine_ext").rglob("*.py")):
        assert not {module for module in imported_modules(path) if module.split(".")[0] == "server"}, path


def test_no_folder_imports_a_folder_that_imports_it_back() -> None:
    edges = {package: folder_edges(package) for package in LAYERED_PACKAGES}
    assert {package: two_way(found) for package, found in edges.items()} == {package: [] for package in edges}
    assert all(edges.values())  # each scan found imports between its package's folders


def test_the_folder_check_sees_a_two_way_edge() -> None:
    assert two_way({("a", "a.b"), ("a.b", "a"), ("a", "c")}) == [("a", "a.b")]
