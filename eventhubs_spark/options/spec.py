"""One option's spec: its key, default, parser, modes, documentation and example; a value parsed by it.

A parse error without an example of its own gets the option's, so every error shows a valid value.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from eventhubs_spark.errors import OptionError
from eventhubs_spark.options.parsers import ALL


@dataclass(frozen=True)
class Spec:
    key: str
    default: Any
    parse: Callable[[str, str], Any]
    doc: str
    example: str
    modes: frozenset[str] = ALL
    secret: bool = False
    # The typed field its value fills: a field of ReadOptions/WriteOptions, "store.<field>" of StoreOptions,
    # "ownership.<field>" of OwnershipOptions; None for the sign-in and network options (they make the
    # connection settings) and the aliases' targets checked elsewhere.
    field: str | None = None


def example_of(spec: Spec) -> str:
    return f".option({spec.key!r}, {spec.example!r})"


def parse_value(spec: Spec, value: str) -> Any:
    """Parse one value; an error without an example gets the option's own."""
    try:
        return spec.parse(spec.key, value)
    except OptionError as exc:
        if exc.example is None:
            raise OptionError(f"{exc}. Example: {example_of(spec)}", example_of(spec)) from None
        raise
