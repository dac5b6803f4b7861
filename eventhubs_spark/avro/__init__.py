"""Avro bodies with the namespace's Schema Registry: read into a struct column ``value``, written from one.

:mod:`eventhubs_spark.avro.types` maps Avro schemas to Spark and Arrow types (and Spark structs to Avro schemas),
:mod:`eventhubs_spark.registry.client` fetches writer schemas (once per executor) and registers the sink's,
:mod:`eventhubs_spark.avro.decode` turns a record batch's bodies into the struct column,
:mod:`eventhubs_spark.avro.encode` rows into bodies. Only the options' entry points live here; nothing imports
fastavro or the registry client until Avro is asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from eventhubs_spark.auth.settings import ConnectionSettings

if TYPE_CHECKING:
    from eventhubs_spark.avro.decode import AvroReading


def reading(
    settings: ConnectionSettings,
    registry: str | None,
    schema: str | None,
    schema_id: str | None,
    mode: str,
    corrupt_column: str,
) -> AvroReading | None:
    """How a read decodes Avro (None: it does not; the ``eventhubs.avro.*`` options, checked together already):
    the reader schema given, or fetched by its id (driver side)."""
    if not registry:
        return None
    from eventhubs_spark.avro.decode import AvroReading
    from eventhubs_spark.avro.types import column, parse
    from eventhubs_spark.registry.client import Registry

    where = Registry.of(registry, settings)
    if schema_id:
        text = where.schema(schema_id, context=" (eventhubs.avro.schemaId)")
        option = "the schema eventhubs.avro.schemaId names"
    else:
        text = str(schema)
        option = "eventhubs.avro.schema"
    column(parse(text, option))  # a schema Spark cannot hold fails here, on the driver, naming the field
    return AvroReading(where, text, mode, corrupt_column)
