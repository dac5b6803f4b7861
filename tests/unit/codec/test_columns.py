"""Unit tests of :mod:`eventhubs_spark.codec.columns`."""

from __future__ import annotations

import datetime as dt
import uuid

from eventhubs_spark.codec.columns import to_text


def test_a_property_value_shows_as_text_the_way_the_sdk_mapping_gives_it():
    assert to_text(None) is None
    assert to_text("text") == "text"
    assert to_text(b"utf-8 \xc3\xa9") == "utf-8 é"
    assert to_text(b"\xff\xfe") == "fffe", "bytes that are not UTF-8 show as hex"
    assert [to_text(v) for v in (True, 7, 2.5)] == ["true", "7", "2.5"]
    ident = uuid.UUID("12345678-1234-5678-1234-567812345678")
    assert to_text(ident) == str(ident)
    assert to_text({"b": [1, 2], "a": "x"}) == '{"a": "x", "b": [1, 2]}', "JSON, keys sorted"
    assert to_text(dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)) is not None
