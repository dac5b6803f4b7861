"""Unit tests of :mod:`eventhubs_spark.json_bodies.spark_text`: a value's text as Spark writes it in a string field
(the expected texts are what Spark 4's ``from_json`` gives; ``tests/integration/spark/test_json_spark.py`` checks the
decoder against Spark itself)."""

from __future__ import annotations

import json
import math
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eventhubs_spark.json_bodies.spark_text import java_double, spark_json_text


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.0007482, "7.482E-4"),  # under 10^-3: scientific, as Java's Double.toString
        (0.001, "0.001"),
        (123.0, "123.0"),  # a whole double keeps its ".0"
        (1234567.0, "1234567.0"),
        (1e7, "1.0E7"),  # from 10^7 on: scientific
        (12345678.9, "1.23456789E7"),
        (-1.5e-10, "-1.5E-10"),
        (-0.0, "-0.0"),
        (0.0, "0.0"),
        (1e23, "1.0E23"),
        (5e-324, "4.9E-324"),  # one digit would do, and Java writes the nearer of two
        (1.7976931348623157e308, "1.7976931348623157E308"),
        (0.1 + 0.2, "0.30000000000000004"),
    ],
)
def test_a_double_reads_as_javas_double_to_string(value, text):
    assert java_double(value) == text


@pytest.mark.parametrize(
    ("document", "text"),
    [
        ('{"a": 1, "b": [true, false, null]}', '{"a":1,"b":[true,false,null]}'),  # compact, in order
        ("[1.0, 2.50, 1e2]", "[1.0,2.5,100.0]"),  # fractions and exponents re-written from their doubles
        ("123456789012345678901234567890", "123456789012345678901234567890"),  # an integer in its own digits
        ('{"t": "x\U0001f633"}', '{"t":"x\\uD83D\\uDE33"}'),  # outside the BMP: two escaped halves
        ('{"t": "café"}', '{"t":"café"}'),  # other non-ASCII as is
        ('{"t": "a\\n\\u0001\\"\\\\/"}', '{"t":"a\\n\\u0001\\"\\\\/"}'),  # control characters escaped, "/" not
        ('{"t": "\\u001f"}', '{"t":"\\u001F"}'),  # upper-case hex
    ],
)
def test_a_value_reads_as_sparks_text_of_it(document, text):
    assert spark_json_text(json.loads(document)) == text


finite = st.floats(allow_nan=False, allow_infinity=False)


@given(finite)
def test_any_double_reads_back_as_itself(x):
    text = java_double(x)
    assert float(text) == x and math.copysign(1.0, float(text)) == math.copysign(1.0, x)
    mantissa = text.lstrip("-").split("E")[0]
    assert "." in mantissa and mantissa.split(".")[1]  # always a fraction digit, as Java writes one
    assert ("E" in text) == (not 1e-3 <= abs(x) < 1e7 and x != 0)


@given(st.recursive(st.none() | st.booleans() | st.integers() | finite | st.text(),
                    lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner), max_leaves=20))  # fmt: skip
def test_any_value_is_json_that_reads_back_as_itself(value):
    parsed = json.loads(spark_json_text(value))
    assert _same(parsed, value)


def _same(a, b) -> bool:
    if isinstance(b, float):
        return isinstance(a, float) and struct.pack("<d", a) == struct.pack("<d", b)
    if isinstance(b, list):
        return isinstance(a, list) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(b, dict):
        return isinstance(a, dict) and list(a) == list(b) and all(_same(a[k], b[k]) for k in b)
    return a == b and type(a) is type(b)
