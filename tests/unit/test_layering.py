"""vLLM's types stop at engine_ext: the server imports nothing from vllm, so a second vLLM version
touches engine_ext alone (the design's one-way data flow)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def imported_modules(path: Path) -> set[str]:
    modules: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules.add(node.module)
    return modules


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
