"""Generates the Python stubs from protos/ into clients/python (`--check`: fail if they are stale): the contract's
(gonka.mlnode.v1) and the vendored protos' (protos/vendor/, compiled from that root so that their modules are named
after their own packages: mlnode.poc.v1).

Run as `python protos/codegen.py [--check]` (the Makefile's `proto` and `proto-check` targets).
"""

from __future__ import annotations

import argparse
import filecmp
import sys
import tempfile
from pathlib import Path

import grpc_tools
from grpc_tools import protoc

PROTO_ROOT = Path(__file__).resolve().parent
PACKAGE_DIR = Path("gonka") / "mlnode" / "v1"
VENDOR_ROOT = PROTO_ROOT / "vendor"
# The API node's pull stream (spec section 6), as published.
VENDORED_PACKAGE_DIR = Path("mlnode") / "poc" / "v1"
# (include root, package folder under it): one protoc run each.
SOURCES = ((PROTO_ROOT, PACKAGE_DIR), (VENDOR_ROOT, VENDORED_PACKAGE_DIR))
PYTHON_OUT = PROTO_ROOT.parent / "clients" / "python"
GENERATED_SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")


def generate(out_dir: Path) -> list[Path]:
    well_known = Path(grpc_tools.__file__).parent / "_proto"
    for root, package_dir in SOURCES:
        protos = sorted((root / package_dir).glob("*.proto"))
        args = [
            "protoc",
            f"-I{root}",
            f"-I{well_known}",
            f"--python_out={out_dir}",
            f"--pyi_out={out_dir}",
            f"--grpc_python_out={out_dir}",
            *(str(path) for path in protos),
        ]
        if protoc.main(args) != 0:
            raise SystemExit("protoc failed")
    return generated_files(out_dir)


def generated_files(root: Path) -> list[Path]:
    return sorted(
        path.relative_to(root)
        for _, package_dir in SOURCES
        if (root / package_dir).is_dir()
        for path in (root / package_dir).iterdir()
        if path.name.endswith(GENERATED_SUFFIXES)
    )


def check() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        fresh = generate(Path(tmp))
        committed = generated_files(PYTHON_OUT)
        stale = [
            str(p)
            for p in fresh
            if not (PYTHON_OUT / p).is_file() or not filecmp.cmp(Path(tmp) / p, PYTHON_OUT / p, shallow=False)
        ]
        orphans = [str(p) for p in committed if p not in fresh]
    if stale or orphans:
        for path in stale:
            print(f"stale generated code: clients/python/{path}", file=sys.stderr)
        for path in orphans:
            print(f"generated file without a proto: clients/python/{path}", file=sys.stderr)
        print("run `make proto` and commit the result", file=sys.stderr)
        return 1
    print(f"generated code is up to date ({len(fresh)} files)")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if the committed stubs are stale")
    args = parser.parse_args()
    if args.check:
        return check()
    for path in generate(PYTHON_OUT):
        print(f"wrote clients/python/{path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
