"""Generated Avro schemas and values of every shape the connector reads (and so must write back): records nested
in records, arrays of records, maps of arrays, enums, fixed, bytes, decimals (bytes and fixed), dates, the four
timestamp kinds, nullable unions. Shared by the unit round trip (fastavro) and the Spark one (the official
``AvroEncoder``).

Values are what the official Python encoder takes and gives back: aware UTC datetimes for ``timestamp-*``,
plain longs for ``local-timestamp-*`` (the Apache Avro library it uses ignores those logical types), dates,
Decimals, bytes. Floats are finite (NaN is not equal to itself) and 32-bit where the type is ``float``.
"""

from __future__ import annotations

import datetime
import itertools
from decimal import Decimal
from typing import Any

from hypothesis import strategies as st

UTC = datetime.timezone.utc
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=UTC)
_LOW, _HIGH = datetime.datetime(1900, 1, 1), datetime.datetime(2200, 1, 1)

# leaf type makers: each takes a fresh name for the named types (enum, fixed)
_LEAVES = [
    lambda n: "boolean",
    lambda n: "int",
    lambda n: "long",
    lambda n: "float",
    lambda n: "double",
    lambda n: "string",
    lambda n: "bytes",
    lambda n: {"type": "enum", "name": f"E{n}", "symbols": ["RED", "GREEN", "BLUE"]},
    lambda n: {"type": "fixed", "name": f"F{n}", "size": 3},
    lambda n: {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2},
    lambda n: {"type": "fixed", "name": f"D{n}", "size": 8, "logicalType": "decimal", "precision": 18, "scale": 4},
    lambda n: {"type": "int", "logicalType": "date"},
    lambda n: {"type": "long", "logicalType": "timestamp-millis"},
    lambda n: {"type": "long", "logicalType": "timestamp-micros"},
    lambda n: {"type": "long", "logicalType": "local-timestamp-millis"},
    lambda n: {"type": "long", "logicalType": "local-timestamp-micros"},
]


def _shape() -> st.SearchStrategy[Any]:
    """A type's shape as nested tuples; names are given when the schema is built (they must be unique)."""
    leaf = st.tuples(st.just("leaf"), st.integers(0, len(_LEAVES) - 1))

    def wrap(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        return st.one_of(
            st.tuples(st.just("array"), inner),
            st.tuples(st.just("map"), inner),
            st.tuples(st.just("nullable"), inner),
            st.tuples(st.just("record"), st.lists(inner, min_size=1, max_size=4)),
        )

    return st.recursive(leaf, wrap, max_leaves=8)


def _schema(shape: Any, names: itertools.count) -> Any:
    kind = shape[0]
    if kind == "leaf":
        return _LEAVES[shape[1]](next(names))
    if kind == "array":
        return {"type": "array", "items": _schema(shape[1], names)}
    if kind == "map":
        return {"type": "map", "values": _schema(shape[1], names)}
    if kind == "nullable":
        inner = _schema(shape[1], names)
        return inner if isinstance(inner, list) else ["null", inner]
    return _record(shape[1], names)


def _record(fields: list[Any], names: itertools.count) -> dict[str, Any]:
    n = next(names)
    return {"type": "record", "name": f"R{n}", "namespace": "gen",
            "fields": [{"name": f"f{i}", "type": _schema(f, names)} for i, f in enumerate(fields)]}  # fmt: skip


def _values(schema: Any) -> st.SearchStrategy[Any]:
    if isinstance(schema, list):
        return st.one_of(st.none(), _values(schema[1]))
    if isinstance(schema, str):
        return {
            "boolean": st.booleans(),
            "int": st.integers(-(2**31), 2**31 - 1),
            "long": st.integers(-(2**63), 2**63 - 1),
            "float": st.floats(width=32, allow_nan=False),
            "double": st.floats(allow_nan=False),
            "string": st.text(max_size=12),
            "bytes": st.binary(max_size=12),
        }[schema]
    kind, logical = schema["type"], schema.get("logicalType")
    if logical == "decimal":
        bound = 10 ** schema["precision"] - 1
        return st.integers(-bound, bound).map(lambda u, s=schema["scale"]: Decimal(u).scaleb(-s))
    if logical == "date":
        return st.dates(_LOW.date(), _HIGH.date())
    if logical in ("timestamp-millis", "timestamp-micros"):
        unit = 1000 if logical == "timestamp-millis" else 1
        low, high = (int((t.replace(tzinfo=UTC) - _EPOCH).total_seconds()) * 1_000_000 for t in (_LOW, _HIGH))
        return st.integers(low // unit, high // unit).map(
            lambda v, u=unit: _EPOCH + datetime.timedelta(microseconds=v * u)
        )
    if logical in ("local-timestamp-millis", "local-timestamp-micros"):
        scale = 1000 if logical == "local-timestamp-millis" else 1_000_000
        low, high = (int((t.replace(tzinfo=UTC) - _EPOCH).total_seconds()) * scale for t in (_LOW, _HIGH))
        return st.integers(low, high)
    if kind == "enum":
        return st.sampled_from(schema["symbols"])
    if kind == "fixed":
        return st.binary(min_size=schema["size"], max_size=schema["size"])
    if kind == "array":
        return st.lists(_values(schema["items"]), max_size=3)
    if kind == "map":
        return st.dictionaries(st.text(max_size=4), _values(schema["values"]), max_size=3)
    if kind == "record":
        return st.fixed_dictionaries({f["name"]: _values(f["type"]) for f in schema["fields"]})
    raise AssertionError(schema)


@st.composite
def schemas_and_values(draw: st.DrawFn, max_values: int = 6) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A record schema of generated fields, and some values of it."""
    fields = draw(st.lists(_shape(), min_size=1, max_size=5))
    schema = _record(fields, itertools.count())
    values = draw(st.lists(_values(schema), min_size=1, max_size=max_values))
    return schema, values
