"""server.core.dataclass_flags: a frozen dataclass's fields declare their flags; argparse reads them, in the order given,
and the dataclass is built back in the fields' own units."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import pytest

from server.core.dataclass_flags import add_flags, flag, flag_values, flags_of, options_from, positive
from server.options import ServerOptions, parse_server_flags


@dataclass(frozen=True)
class Listener:
    port: int = flag("--listen-port", parse=positive(int), help="port", field_required=True)
    size_bytes: int = flag("--size-kib", parse=positive(int), default=2, to_field=lambda kib: kib * 1024, help="size")
    name: str = flag("--name", default="x", choices=("x", "y"), help="name (default: %(default)s)")


def parser_of(*flags_in_order: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="p", add_help=False)
    flags = flags_of(Listener)
    add_flags(parser.add_argument_group("listener"), [flags[name] for name in flags_in_order])
    return parser


def test_the_dataclass_is_built_from_the_flags_in_the_fields_units() -> None:
    namespace = parser_of("port", "size_bytes", "name").parse_args(["--listen-port", "80", "--size-kib", "3"])
    assert options_from(Listener, namespace) == Listener(port=80, size_bytes=3 * 1024, name="x")


def test_a_field_defaults_to_its_flags_default_in_its_own_units_unless_required() -> None:
    assert flag_values(Listener, parser_of("port", "size_bytes", "name").parse_args([])) == {
        "port": None,
        "size_bytes": 2048,
        "name": "x",
    }
    with pytest.raises(TypeError):
        Listener()  # type: ignore[call-arg]


def test_flags_are_added_in_the_order_given_with_their_help_and_checks(capsys: pytest.CaptureFixture) -> None:
    parser = parser_of("name", "port")
    assert parser.format_usage() == "usage: p [--name {x,y}] [--listen-port LISTEN_PORT]\n"
    assert "name (default: x)" in parser.format_help()
    with pytest.raises(SystemExit):
        parser.parse_args(["--listen-port", "0"])
    assert "argument --listen-port: must be positive, got '0'" in capsys.readouterr().err


def test_the_servers_option_defaults_are_its_flags_defaults() -> None:
    assert ServerOptions.from_args(parse_server_flags("python -m server", [])) == ServerOptions()
