"""Unit tests of :mod:`eventhubs_spark.options.specs` (with the rows of
:mod:`eventhubs_spark.options.connection_specs` first)."""

from __future__ import annotations

import pytest

from eventhubs_spark.errors import OptionError
from eventhubs_spark.options.connection_specs import CONNECTION_SPECS
from eventhubs_spark.options.spec import example_of, parse_value
from eventhubs_spark.options.specs import BY_KEY, SPECS


def test_every_key_is_in_the_table_once_and_the_connection_rows_come_first():
    keys = [spec.key.lower() for spec in SPECS]
    assert len(keys) == len(set(keys)) == len(BY_KEY)
    assert SPECS[: len(CONNECTION_SPECS)] == CONNECTION_SPECS


@pytest.mark.parametrize("spec", SPECS, ids=lambda spec: spec.key)
def test_every_example_parses_with_its_own_parser_and_shows_as_an_option_call(spec):
    """Each example is a valid value, except a file that must exist on every node (the example's path is a
    Databricks volume's, not this machine's): that one is refused naming the option."""
    try:
        parse_value(spec, spec.example)
    except OptionError as exc:
        assert spec.key == "eventhubs.connectionVerify" and "no file" in str(exc), exc
    assert example_of(spec) == f".option({spec.key!r}, {spec.example!r})"
