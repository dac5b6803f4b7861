"""JSON bodies' column types: inferred from documents, merged, widened, and written as Spark DDL or read from it.

Why a type system of our own, small: a schema must be inferred the same way on every Spark (4.0 to 4.3, classic
and Connect) and in a process without a JVM, and kept as text a restart reads back exactly. Types are Arrow types
(what the decoder fills): ``int64``, ``float64``, ``bool``, ``string``, structs (fields in first-seen order) and
lists; a user's fixed schema may also say ``timestamp`` (parsed from ISO 8601 text) and ``date``. Inference never
makes a timestamp: text stays text unless the schema says otherwise.

Why it is built so: the design notes in docs/pages/architecture.md.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pyarrow as pa

LONG, DOUBLE, BOOL, TEXT, NULL = pa.int64(), pa.float64(), pa.bool_(), pa.string(), pa.null()
TIMESTAMP, DATE = pa.timestamp("us", tz="UTC"), pa.date32()

_LIMIT = 1 << 63  # int64's range: a larger integer does not fit a long


def of_value(value: Any) -> pa.DataType:
    """The type one parsed JSON value (as Python's ``json`` gives it) asks for."""
    if value is None:
        return NULL
    if isinstance(value, bool):
        return BOOL
    if isinstance(value, int):
        return LONG if -_LIMIT <= value < _LIMIT else DOUBLE
    if isinstance(value, float):
        return DOUBLE
    if isinstance(value, str):
        return TEXT
    if isinstance(value, dict):
        return pa.struct([pa.field(str(k), of_value(v)) for k, v in value.items()])
    if isinstance(value, list):
        element: pa.DataType = NULL
        for item in value:
            element = merge(element, of_value(item))
        return pa.list_(element)
    return TEXT


def merge(a: pa.DataType, b: pa.DataType) -> pa.DataType:
    """The narrowest type both ``a`` and ``b`` fit (see the module's rules)."""
    if a == b:
        return a
    if a == NULL:
        return b
    if b == NULL:
        return a
    if {a, b} == {LONG, DOUBLE}:
        return DOUBLE
    if pa.types.is_struct(a) and pa.types.is_struct(b):
        fields = {f.name: f.type for f in a}
        for f in b:
            fields[f.name] = merge(fields[f.name], f.type) if f.name in fields else f.type
        return pa.struct([pa.field(name, t) for name, t in fields.items()])
    if pa.types.is_list(a) and pa.types.is_list(b):
        return pa.list_(merge(a.value_type, b.value_type))
    return TEXT


def settled(t: pa.DataType) -> pa.DataType:
    """``t`` with every type no document told (a field only ever null, an empty list's element) made ``string``."""
    if t == NULL:
        return TEXT
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, settled(f.type)) for f in t])
    if pa.types.is_list(t):
        return pa.list_(settled(t.value_type))
    return t


def added(old: pa.DataType, new: pa.DataType, path: str = "") -> list[str]:
    """What ``new`` has that ``old`` lacks or types otherwise, as dotted paths (``order.lines[].sku``)."""
    if old == new:
        return []
    if pa.types.is_struct(old) and pa.types.is_struct(new):
        names = {f.name: f.type for f in old}
        out: list[str] = []
        for f in new:
            where = f"{path}.{f.name}" if path else f.name
            out += [where] if f.name not in names else added(names[f.name], f.type, where)
        return out
    if pa.types.is_list(old) and pa.types.is_list(new):
        return added(old.value_type, new.value_type, path + "[]")
    return [f"{path} ({ddl(old)} -> {ddl(new)})"]


def ddl(t: pa.DataType) -> str:
    """Spark's DDL for ``t`` (field names quoted, so any name a document has is kept)."""
    if pa.types.is_struct(t):
        return "struct<" + ",".join(f"{_quote(f.name)}:{ddl(f.type)}" for f in t) + ">"
    if pa.types.is_list(t):
        return f"array<{ddl(t.value_type)}>"
    names = {LONG: "bigint", DOUBLE: "double", BOOL: "boolean", TEXT: "string", TIMESTAMP: "timestamp", DATE: "date",
             pa.int32(): "int", NULL: "void"}  # fmt: skip
    if t in names:
        return names[t]
    raise ValueError(f"no Spark type for {t}")


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


_SCALARS = {"bigint": LONG, "long": LONG, "int": pa.int32(), "integer": pa.int32(), "double": DOUBLE,
            "float": DOUBLE, "boolean": BOOL, "bool": BOOL, "string": TEXT, "timestamp": TIMESTAMP,
            "date": DATE}  # fmt: skip
_TOKEN = re.compile(r"\s*(`(?:[^`]|``)*`|[A-Za-z_][A-Za-z0-9_]*|[<>,:])")


def parse_schema(text: str) -> pa.StructType:
    """A user's fixed schema: Spark DDL (``id bigint, payload struct<kind:string, n:array<double>>``) or a Spark
    schema's JSON (``df.schema.json()``), with the types listed above. Raises ValueError naming what it could not
    read."""
    text = text.strip()
    if text.startswith("{"):
        return _from_spark_json(json.loads(text))
    tokens = _tokens(text)
    fields, rest = _fields(tokens, 0, end=None)
    if rest != len(tokens):
        raise ValueError(f"unexpected {tokens[rest]!r} after the fields")
    return pa.struct(fields)


def _tokens(text: str) -> list[str]:
    out, p = [], 0
    while p < len(text):
        if text[p:].strip() == "":
            break
        found = _TOKEN.match(text, p)
        if found is None:
            raise ValueError(f"cannot read {text[p : p + 20]!r}")
        out.append(found.group(1))
        p = found.end()
    return out


def _name(token: str) -> str:
    return token[1:-1].replace("``", "`") if token.startswith("`") else token


def _fields(tokens: list[str], p: int, end: str | None) -> tuple[list[pa.Field], int]:
    """Fields ``name type`` (top level) or ``name:type`` (inside struct<>), comma-separated, up to ``end``."""
    fields = []
    while p < len(tokens) and tokens[p] != end:
        name = _name(tokens[p])
        p += 1
        if p < len(tokens) and tokens[p] == ":":
            p += 1
        t, p = _type(tokens, p)
        fields.append(pa.field(name, t))
        if p < len(tokens) and tokens[p] == ",":
            p += 1
    return fields, p


def _type(tokens: list[str], p: int) -> tuple[pa.DataType, int]:
    if p >= len(tokens):
        raise ValueError("a type is missing at the end")
    word = tokens[p].lower()
    if word == "struct" and tokens[p + 1 : p + 2] == ["<"]:
        fields, p = _fields(tokens, p + 2, end=">")
        return pa.struct(fields), p + 1
    if word == "array" and tokens[p + 1 : p + 2] == ["<"]:
        element, p = _type(tokens, p + 2)
        if tokens[p : p + 1] != [">"]:
            raise ValueError("array<...> is not closed")
        return pa.list_(element), p + 1
    if word in _SCALARS:
        return _SCALARS[word], p + 1
    raise ValueError(f"type {tokens[p]!r} is not one a JSON body is read as (bigint, int, double, boolean, string, "
                     "timestamp, date, struct<...>, array<...>)")  # fmt: skip


def _from_spark_json(schema: dict[str, Any]) -> pa.StructType:
    def of(t: Any) -> pa.DataType:
        if isinstance(t, str):
            if t in ("long", "integer", "double", "float", "boolean", "string", "timestamp", "date"):
                return _SCALARS[t]
            raise ValueError(f"type {t!r} is not one a JSON body is read as")
        if t.get("type") == "struct":
            return pa.struct([pa.field(f["name"], of(f["type"])) for f in t["fields"]])
        if t.get("type") == "array":
            return pa.list_(of(t["elementType"]))
        raise ValueError(f"type {t!r} is not one a JSON body is read as")

    t = of(schema)
    if not pa.types.is_struct(t):
        raise ValueError("the schema must be a struct")
    return t


def to_text(t: pa.StructType) -> str:
    """The kept form of a schema: Spark's DDL of its fields (what :func:`parse_schema` reads back)."""
    return ", ".join(f"{_quote(f.name)} {ddl(f.type)}" for f in t)


def to_spark_json(t: pa.DataType) -> Any:
    """``t`` as Spark writes a schema in JSON (``df.schema.json()``), which :func:`parse_schema` reads too."""
    if pa.types.is_struct(t):
        return {"type": "struct", "fields": [{"name": f.name, "type": to_spark_json(f.type), "nullable": True,
                                              "metadata": {}} for f in t]}  # fmt: skip
    if pa.types.is_list(t):
        return {"type": "array", "elementType": to_spark_json(t.value_type), "containsNull": True}
    names = {LONG: "long", DOUBLE: "double", BOOL: "boolean", TEXT: "string", TIMESTAMP: "timestamp", DATE: "date",
             pa.int32(): "integer"}  # fmt: skip
    return names[t]
