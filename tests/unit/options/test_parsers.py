"""Unit tests of :mod:`eventhubs_spark.options.parsers`."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eventhubs_spark.errors import OptionError
from eventhubs_spark.options import parse_duration

_SCALE = {"": 1.0, "ms": 0.001, "s": 1.0, "sec": 1.0, "seconds": 1.0, "m": 60.0, "min": 60.0, "minutes": 60.0,
          "h": 3600.0, "hours": 3600.0}  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(
    st.integers(min_value=-5, max_value=10**6),
    st.sampled_from([None, 0, 5]),
    st.sampled_from([*_SCALE, "x", "days", "mss"]),
    st.sampled_from(["", " "]),
)
def test_a_duration_means_its_number_times_its_unit_or_is_refused_naming_the_option(whole, tenth, unit, gap):
    """Durations written from their parts (not from the parser's pattern), each checked against what it
    must mean: the number times the unit's seconds; a negative number or an unknown unit is refused."""
    text = f"{whole}{'' if tenth is None else f'.{tenth}'}{gap if unit else ''}{unit}"
    number = whole + (tenth or 0) / 10
    if whole < 0 or unit not in _SCALE:
        with pytest.raises(OptionError, match=r"eventhubs.receiverTimeout.*Example"):
            parse_duration("eventhubs.receiverTimeout", text)
        return
    assert parse_duration("eventhubs.receiverTimeout", text) == pytest.approx(number * _SCALE[unit])


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("60", 60), ("60s", 60), ("500ms", 0.5), ("15m", 900), ("1h", 3600), ("PT1M", 60), ("PT1H30M", 5400)],
)
def test_durations(text, seconds):
    assert parse_duration("o", text) == seconds
