"""Unit tests of :mod:`eventhubs_spark.codec.arrays`."""

from __future__ import annotations

import json
import sys
from types import ModuleType

import numpy as np
import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventhubs_spark.avro.decode import Decoder
from tests.avro_shapes import schemas_and_values
from tests.unit.support.avro import body


def test_from_values_converts_by_itself_until_it_has_cost_a_pandas_import_then_leaves_it_to_pa_array(monkeypatch):
    """Its own conversion is slower per value than ``pa.array``'s, so it is used only while pandas is not loaded
    and until its time in the process adds up to about what importing pandas costs."""
    from eventhubs_spark.codec import arrays

    own: list[int] = []
    convert = arrays._from_values
    monkeypatch.setattr(arrays, "_from_values", lambda values, type_: own.append(len(values)) or convert(values, type_))
    values, type_ = [{"a": 1, "b": ["x"]}, None], pa.struct([("a", pa.int64()), ("b", pa.list_(pa.string()))])
    expected = pa.array(values, type_)
    monkeypatch.delitem(sys.modules, "pandas", raising=False)  # as in a fresh worker (restored after the test)
    monkeypatch.setattr(arrays, "_own_spent", 0.0)
    assert arrays.from_values(values, type_).equals(expected) and own[0] == 2, "its own (and its children's)"
    assert 0 < arrays._own_spent < arrays._OWN_BUDGET, "its time counted"
    calls = len(own)
    monkeypatch.setattr(arrays, "_own_spent", arrays._OWN_BUDGET)
    assert arrays.from_values(values, type_).equals(expected) and len(own) == calls, "budget spent: pa.array"
    monkeypatch.setattr(arrays, "_own_spent", 0.0)
    monkeypatch.setitem(sys.modules, "pandas", ModuleType("pandas"))
    assert arrays.from_values(values, type_).equals(expected) and len(own) == calls, "pandas loaded: pa.array"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(schemas_and_values(), st.integers(0, 3))
def test_fastavros_values_become_the_arrays_pa_array_makes(generated, nulls):
    """``arrays.from_values``' own conversion against ``pa.array`` on every shape's plain values as fastavro gives
    them (records, arrays, maps, nullable unions, nested), nulls among them: it takes them all, as they are."""
    from eventhubs_spark.codec import arrays

    schema, values = generated
    decoder = Decoder(json.dumps(schema), json.dumps(schema))
    plain, _ = decoder.values(pa.array([body(schema, v) for v in values], pa.binary()))
    plain = [None] * nulls + plain
    got = arrays._from_values(plain, decoder._plain)  # not from_values: once pandas is loaded that is pa.array
    got.validate(full=True)
    assert got.equals(pa.array(plain, decoder._plain))


@settings(deadline=None)  # the first pa.array() call imports pandas
@given(st.lists(st.none() | st.text()), st.lists(st.none() | st.binary()))
def test_arrays_made_from_buffers_equal_what_pa_array_makes(texts: list[str | None], blobs: list[bytes | None]) -> None:
    from eventhubs_spark.codec import arrays

    assert arrays.texts(texts).equals(pa.array(texts, pa.string()))
    assert arrays.binaries(blobs).equals(pa.array(blobs, pa.binary()))
    ints = np.arange(len(texts), dtype=np.int64)
    valid = np.array([t is not None for t in texts], dtype=bool)
    assert arrays.numbers(ints, pa.int64(), valid).equals(pa.array(ints, pa.int64(), mask=~valid))
    assert arrays.booleans(valid).equals(pa.array(valid, pa.bool_()))
    flags = pa.array([None if t is None else len(t) % 2 == 0 for t in texts], pa.bool_())
    numbers = pa.array(ints, pa.int64(), mask=~valid)
    for skip in (0, 1, 3):  # an array's own slice: its offset into the buffers
        some, numbered = flags.slice(skip), numbers.slice(skip)
        assert arrays.bool_values(some).tolist() == [bool(f) for f in some.to_pylist()]
        assert arrays.valid_values(some).tolist() == [f is not None for f in some.to_pylist()]
        assert arrays.int_values(numbered)[arrays.valid_values(numbered)].tolist() == [
            v for v in numbered.to_pylist() if v is not None
        ]
    assert arrays.valid_values(pa.nulls(3)).tolist() == [False] * 3
