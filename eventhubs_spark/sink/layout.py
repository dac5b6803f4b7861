"""Which input column of a write plays which role (body, key, partition, properties), checked on the driver."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from eventhubs_spark.avro.encode import AvroWriting
from eventhubs_spark.errors import SinkError
from eventhubs_spark.json_bodies.encode import JsonWriting

COLUMNS_HELP = (
    "the eventhubs sink takes the columns body (string or binary, required), and optionally partitionKey "
    "(string) or partitionId (string or int; 'partition' is accepted too), and properties (map<string,string>)"
)


def value_columns_help(kind: str) -> str:
    """What a write through the Schema Registry takes (``kind``: Avro or JSON)."""
    return (f"writing {kind} (eventhubs.{kind.lower()}.schemaRegistry), the eventhubs sink takes the columns value (a "
            f"struct, required; its {kind} body is the event's), and optionally partitionKey (string) or partitionId "
            "(string or int), and properties (map<string,string>)")  # fmt: skip


@dataclass(frozen=True)
class SinkLayout:
    """Which input column plays which role, validated on the driver from the DataFrame's schema."""

    body: int
    body_is_text: bool
    partition_key: int | None = None
    partition_id: int | None = None
    properties: int | None = None
    encoder: AvroWriting | JsonWriting | None = None  # the body column is a struct, written as registered Avro or JSON


def layout_for(schema: Any, value: str | None = None) -> SinkLayout:
    """Check the DataFrame's columns; any other column or a wrong type is an error naming it. With ``value`` (Avro
    or JSON: how the registry's schema writes it), the body comes from the struct column ``value`` instead of
    ``body``."""
    from pyspark.sql.types import BinaryType, IntegerType, LongType, MapType, ShortType, StringType, StructType

    names = [f.name for f in schema.fields]
    registered = value is not None  # a struct value column, written through the registry
    help_text = value_columns_help(value) if value is not None else COLUMNS_HELP
    roles: dict[str, int] = {}
    for index, f in enumerate(schema.fields):
        name = f.name.lower()
        if registered and name == "value":
            if not isinstance(f.dataType, StructType):
                raise SinkError(f"column 'value' must be a struct to be written as {value}, got "
                                f"{f.dataType.simpleString()}; {help_text}")  # fmt: skip
            roles["body"] = index
        elif registered and name == "body":
            raise SinkError(f"column 'body' is not written when writing {value}: {help_text}. Drop it, or drop "
                            f"eventhubs.{str(value).lower()}.schemaRegistry to send it as is")  # fmt: skip
        elif name == "body":
            if not isinstance(f.dataType, StringType | BinaryType):
                raise SinkError(
                    f"column 'body' must be string or binary, got {f.dataType.simpleString()}; {COLUMNS_HELP}"
                )
            roles["body"] = index
        elif name == "partitionkey":
            if not isinstance(f.dataType, StringType):
                raise SinkError(f"column 'partitionKey' must be string, got {f.dataType.simpleString()}")
            roles["partitionkey"] = index
        elif name in ("partitionid", "partition"):
            if not isinstance(f.dataType, StringType | IntegerType | LongType | ShortType):
                raise SinkError(f"column '{f.name}' must be string or int, got {f.dataType.simpleString()}")
            if "partitionid" in roles:
                raise SinkError("give either 'partitionId' or 'partition', not both")
            roles["partitionid"] = index
        elif name == "properties":
            ok = (
                isinstance(f.dataType, MapType)
                and isinstance(f.dataType.keyType, StringType)
                and isinstance(f.dataType.valueType, StringType)
            )
            if not ok:
                raise SinkError(f"column 'properties' must be map<string,string>, got {f.dataType.simpleString()}")
            roles["properties"] = index
        else:
            raise SinkError(f"unexpected column {f.name!r}: {help_text}. Select only "
                            "those columns.")  # fmt: skip
    if "body" not in roles:
        if registered:
            raise SinkError(f"no 'value' column among {names}: {help_text}")
        raise SinkError(f"no 'body' column among {names}: {COLUMNS_HELP}")
    return SinkLayout(
        body=roles["body"],
        body_is_text=not registered and isinstance(schema.fields[roles["body"]].dataType, StringType),
        partition_key=roles.get("partitionkey"),
        partition_id=roles.get("partitionid"),
        properties=roles.get("properties"),
    )
