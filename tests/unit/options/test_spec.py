"""Unit tests of :mod:`eventhubs_spark.options.spec`."""

from __future__ import annotations

import pytest

from eventhubs_spark.errors import OptionError
from eventhubs_spark.options.spec import parse_value
from eventhubs_spark.options.specs import BY_KEY


def test_a_bad_value_without_an_example_of_its_own_gets_the_options():
    spec = BY_KEY["maxeventspertrigger"]
    with pytest.raises(OptionError) as info:
        parse_value(spec, "lots")
    assert "maxEventsPerTrigger" in str(info.value) and info.value.example
