"""JSON bodies whose schema is in the Schema Registry: each body checked against the schema its content type names
(eventhubs.json.validate), and a new schema version grown from a new id's registered types, not guessed from values.

The official ``JsonSchemaEncoder`` sends a body's schema id in its content type,
``application/json;serialization=Json+<id>``. Reading does not need the id (the reader's schema types every body,
and what does not fit is rescued as any JSON read's is); validating does, and so does growing the schema, where a
registered ``format: date-time`` says timestamp and a value alone would say string.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pyarrow as pa

from eventhubs_spark.errors import DoesNotFit, RegistryError
from eventhubs_spark.json_bodies import types
from eventhubs_spark.json_bodies.decode import FAIL, JsonReading, Outcome
from eventhubs_spark.json_bodies.json_schema import column_type
from eventhubs_spark.registry.client import Registry, schema_id


def validator(schema: str, where: str) -> Callable[[Any], str | None]:
    """A check of a parsed document against the JSON Schema ``schema``: None, or what is wrong (the first error by
    ``jsonschema``'s own ranking, with its path). The draft is the schema's ``$schema``, else 2020-12; formats are
    not asserted, as the official encoder's validator does not assert them."""
    try:
        import jsonschema
    except ImportError:
        raise RegistryError("eventhubs.json.validate needs the jsonschema package: pip install "
                            "'eventhubs-spark[registry]' (on Databricks: %pip install 'eventhubs-spark[registry]')",
                            retriable=False) from None  # fmt: skip
    document = json.loads(schema)
    kind = jsonschema.validators.validator_for(document, default=jsonschema.Draft202012Validator)
    check = kind(document)

    def problem(value: Any) -> str | None:
        if check.is_valid(value):  # the common case, without collecting errors to rank
            return None
        error = jsonschema.exceptions.best_match(check.iter_errors(value))
        if error is None:
            return None
        path = "/".join(str(p) for p in error.absolute_path)
        return f"{path or 'the top'}: {error.message}"[:300]

    return problem


@dataclass(frozen=True)
class RegisteredJsonReading(JsonReading):
    """A JSON read whose bodies name their schema in the registry (eventhubs.json.schemaRegistry): the value column
    typed from ``schema_id``'s schema; each body checked against its own when ``validate`` is on; the schema grown
    from a new id's registered types."""

    registry: Registry | None = None
    schema_id: str | None = None  # the registered schema the value column is typed from
    validate: bool = False  # eventhubs.json.validate

    def checked(self, batch: pa.RecordBatch, outcome: Outcome) -> Outcome:
        return validated(self, batch, outcome) if self.validate else outcome

    def proposal(self, batch: pa.RecordBatch, outcome: Outcome) -> pa.DataType | None:
        return registered_proposal(self, batch, outcome)


def validated(reading: RegisteredJsonReading, batch: pa.RecordBatch, outcome: Outcome) -> Outcome:
    """``outcome`` with each body that does not validate against its own schema (by its content type's id) made a
    null value, its text and what is wrong in the rescue column (``{"_body": ..., "_invalid": ...}``); under
    failOnNewColumns the first such body fails the task instead."""
    from eventhubs_spark.avro.decode import content_types

    assert reading.registry is not None
    kinds = content_types(batch.column("systemProperties")).to_pylist()
    bodies = batch.column("body").to_pylist()
    valid = outcome.values.is_valid().to_numpy(zero_copy_only=False)
    checks: dict[str, Callable[[Any], str | None]] = {}
    rescued = None
    invalid = np.zeros(len(bodies), dtype=bool)
    for row, (kind, body) in enumerate(zip(kinds, bodies, strict=True)):
        if not valid[row]:
            continue  # not a JSON object: already rescued whole
        found = schema_id(kind, "Json")
        if found is None:
            problem: str | None = (f"its content type is {kind!r}, not application/json;serialization=Json+<schema "
                                   "id> (the JSON Schema encoder's)")  # fmt: skip
        else:
            check = checks.get(found)
            if check is None:
                named_by = f" ({reading.where(batch, row, 'names it')})"
                check = checks[found] = validator(reading.registry.schema(found, context=named_by),
                                                  f"schema id {found}")  # fmt: skip
            problem = check(json.loads(body))
        if problem is None:
            continue
        if reading.mode == FAIL:
            raise DoesNotFit(f"{reading.where(batch, row, 'does not validate')} against schema id {found}: {problem} "
                             "(eventhubs.json.validate); eventhubs.json.schemaEvolutionMode rescue keeps such bodies "
                             "in the rescue column instead")  # fmt: skip
        if rescued is None:
            rescued = outcome.rescued.to_pylist()
        rescued[row] = json.dumps({"_body": body.decode("utf-8"), "_invalid": problem}, ensure_ascii=False)
        invalid[row] = True
    if rescued is None:
        return outcome
    values = outcome.values
    keep = valid & ~invalid
    nulled = pa.StructArray.from_arrays(values.flatten(), fields=list(values.type), mask=pa.array(~keep))
    first = int(np.flatnonzero(invalid)[0])
    earlier = outcome.first_misfit
    return replace(outcome, values=nulled, rescued=pa.array(rescued, pa.string()),
                   first_misfit=first if earlier is None else min(earlier, first))  # fmt: skip


def registered_proposal(reading: RegisteredJsonReading, batch: pa.RecordBatch, outcome: Outcome) -> pa.DataType | None:
    """What the bodies ask the schema to grow to, typed by the registry: the registered schemas of the ids the batch
    names (the reader's own aside), then the fields only the values show (as inference types them)."""
    from eventhubs_spark.avro.decode import content_types

    assert reading.registry is not None
    found: pa.DataType | None = None
    for kind in content_types(batch.column("systemProperties")).unique().to_pylist():
        named = schema_id(kind, "Json")
        if named is None or named == reading.schema_id:
            continue
        registered = column_type(reading.registry.schema(named), f"schema id {named}")
        found = registered if found is None else overlay(found, registered)
    if outcome.proposed is None:
        return found
    return outcome.proposed if found is None else overlay(found, outcome.proposed)


def overlay(a: pa.DataType, b: pa.DataType) -> pa.DataType:
    """``a``, with the fields of ``b`` that ``a`` lacks added (structs, at any depth); ``a``'s types win."""
    if pa.types.is_struct(a) and pa.types.is_struct(b):
        fields = {f.name: f.type for f in a}
        for f in b:
            fields[f.name] = overlay(fields[f.name], f.type) if f.name in fields else f.type
        return pa.struct([pa.field(n, t) for n, t in fields.items()])
    if pa.types.is_list(a) and pa.types.is_list(b):
        return pa.list_(overlay(a.value_type, b.value_type))
    return types.settled(a) if a != types.NULL else b
