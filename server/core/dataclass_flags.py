"""Command-line flags declared on the fields of a frozen options dataclass, as vLLM's EngineArgs declares its own:
each field names its flag, with the flag's help, default, choices and parser, so a flag is written once. argparse
reads the flags; the dataclass is built back from what it read. Plus the value parsers the flags share.

Imports nothing else of the server: every options module (the server's, and its packages') uses it.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

N = TypeVar("N", int, float)
Options = TypeVar("Options")

# The key under which a field's metadata holds its Flag.
_FLAG = "flag"


@dataclasses.dataclass(frozen=True)
class Flag:
    """How one field is read from the command line."""

    name: str
    help: str
    # The flag's default, in the flag's own units (what `%(default)s` shows).
    default: Any = None
    # argparse's `type`: reads (and checks) the text given; None: the text itself.
    parse: Callable[[str], Any] | None = None
    metavar: str | None = None
    choices: Sequence[str] | None = None
    # The field's value from the flag's (MiB to bytes, a name to its enum); None: the flag's value itself.
    to_field: Callable[[Any], Any] | None = None

    @property
    def dest(self) -> str:
        """The namespace attribute argparse stores the value under (its own rule for a long flag)."""
        return self.name.lstrip("-").replace("-", "_")

    def add_to(self, group: argparse._ArgumentGroup) -> None:
        # str: argparse's own reading of a flag without a `type`.
        parse = self.parse or str
        group.add_argument(
            self.name, type=parse, default=self.default, metavar=self.metavar, choices=self.choices, help=self.help
        )

    def field_value(self, namespace: argparse.Namespace) -> Any:
        value = getattr(namespace, self.dest)
        return value if self.to_field is None else self.to_field(value)


def flag(
    name: str,
    help: str,
    *,
    default: Any = None,
    parse: Callable[[str], Any] | None = None,
    metavar: str | None = None,
    choices: Sequence[str] | None = None,
    to_field: Callable[[Any], Any] | None = None,
    field_required: bool = False,
) -> Any:
    """A dataclass field read from the flag `name`. The field's default is the flag's (converted by `to_field`),
    unless `field_required`: a field that must be given though its flag may be left out (a port whose flag turns a
    listener on)."""
    read = Flag(name, help, default, parse, metavar, choices, to_field)
    if field_required:
        return dataclasses.field(metadata={_FLAG: read})
    field_default = default if to_field is None else to_field(default)
    return dataclasses.field(default=field_default, metadata={_FLAG: read})


def flags_of(options_class: type) -> dict[str, Flag]:
    """The flags of `options_class`'s fields, by field name, in field order (fields without a flag left out)."""
    return {field.name: field.metadata[_FLAG] for field in dataclasses.fields(options_class) if _FLAG in field.metadata}


def add_flags(group: argparse._ArgumentGroup, flags: Iterable[Flag]) -> None:
    """Adds `flags` to `group`, in the order given (the order `--help` lists them in)."""
    for each in flags:
        each.add_to(group)


def flag_values(options_class: type, namespace: argparse.Namespace) -> dict[str, Any]:
    """The values of `options_class`'s flagged fields, by field name, from what argparse read into `namespace`."""
    return {name: each.field_value(namespace) for name, each in flags_of(options_class).items()}


def options_from(options_class: type[Options], namespace: argparse.Namespace, **given: Any) -> Options:
    """An `options_class` of what argparse read into `namespace`; `given`: the fields it does not read."""
    return options_class(**flag_values(options_class, namespace), **given)


def positive(number: Callable[[str], N]) -> Callable[[str], N]:
    def parse(text: str) -> N:
        value = number(text)
        if not value > 0:  # also refuses NaN
            raise argparse.ArgumentTypeError(f"must be positive, got {text!r}")
        return value

    # argparse names the type in its message for a value `number` cannot read ("invalid int value").
    parse.__name__ = number.__name__
    return parse


def non_negative(number: Callable[[str], N]) -> Callable[[str], N]:
    def parse(text: str) -> N:
        value = number(text)
        if not value >= 0:
            raise argparse.ArgumentTypeError(f"must be 0 or more, got {text!r}")
        return value

    parse.__name__ = number.__name__
    return parse


def at_least(kind: type, lowest: float, strictly: bool = False) -> Callable[[str], float]:
    """The PoC flags' bound, with their own message ("must be >= 0, got -1"); argparse calls a value `kind` cannot
    read an "invalid check value", after this function's name, as it always has for these flags."""

    def check(text: str) -> float:
        value = kind(text)
        if value < lowest or (strictly and value == lowest):
            raise argparse.ArgumentTypeError(f"must be {'>' if strictly else '>='} {lowest}, got {text}")
        return value

    return check
