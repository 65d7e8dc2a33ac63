"""scripts/install-offline-wheels.sh puts on the exported PYTHONPATH the folders that wheels' .pth files name: a
folder on PYTHONPATH is no site directory, so Python reads no .pth there (nvidia-cutlass-dsl's `cutlass`, which
DeepSeek-V4's kernels import, lives in such a folder; the H200 run failed with "No module named 'cutlass'")."""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

from tests.support.server_process import REPO_ROOT

SCRIPT = REPO_ROOT / "scripts" / "install-offline-wheels.sh"


def _wheel(folder: Path, pth_text: str) -> Path:
    """A minimal wheel whose module sits in a folder that its .pth file names (as nvidia-cutlass-dsl-libs-base's)."""
    files = {
        "demo_pth.pth": pth_text,
        "demo_pth_pkgs/python_packages/demo_module/__init__.py": "ANSWER = 42\n",
        "demo_pth-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: demo-pth\nVersion: 1.0\n",
        "demo_pth-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(text.encode())}")
    record.append("demo_pth-1.0.dist-info/RECORD,,")
    path = folder / "demo_pth-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        for name, text in files.items():
            wheel.writestr(name, text)
        wheel.writestr("demo_pth-1.0.dist-info/RECORD", "\n".join(record) + "\n")
    return path


def _install(tmp_path: Path, pth_text: str) -> str:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _wheel(wheels, pth_text)
    environment = {**os.environ, "PYTHON": sys.executable}
    printed = subprocess.run(
        ["bash", str(SCRIPT), str(wheels), str(tmp_path / "site")],
        env=environment,
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    ).stdout
    return printed.strip().splitlines()[-1]


def test_the_folder_a_pth_file_names_is_exported_and_imports(tmp_path: Path) -> None:
    # As the cutlass wheel writes it: one line, no final newline.
    export = _install(tmp_path, "demo_pth_pkgs/python_packages")
    site = (tmp_path / "site").resolve()
    assert export == f"export PYTHONPATH={site}:{site}/demo_pth_pkgs/python_packages${{PYTHONPATH:+:$PYTHONPATH}}"
    # The same path is kept in the target for `make gpu-check`.
    path = (site / ".python-path").read_text().strip()
    assert path == f"{site}:{site}/demo_pth_pkgs/python_packages"
    answer = subprocess.run(
        [sys.executable, "-c", "import demo_module; print(demo_module.ANSWER)"],
        env={**os.environ, "PYTHONPATH": path},
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert answer.strip() == "42"


def test_pth_lines_that_are_code_comments_or_missing_folders_are_left_out(tmp_path: Path) -> None:
    export = _install(tmp_path, "# a comment\nimport os\nno_such_folder\n")
    site = (tmp_path / "site").resolve()
    assert export == f"export PYTHONPATH={site}${{PYTHONPATH:+:$PYTHONPATH}}"
