"""The source's schema: what every record batch a read yields looks like.

The schema is the azure-event-hubs-spark connector's, so queries migrate unchanged. Batches must
match ``to_arrow_schema(schema)`` exactly (timestamps as ``timestamp('us', tz='UTC')``), which is
what lets Spark take them without a row-by-row conversion (and what Spark 4.2+ checks). How events
become such batches is :mod:`eventhubs_spark.codec`'s.
"""

from __future__ import annotations

import pyarrow as pa

SCHEMA_DDL = (
    "body binary, partition string, offset string, sequenceNumber long, enqueuedTime timestamp, "
    "publisher string, partitionKey string, properties map<string,string>, systemProperties map<string,string>"
)

ARROW_SCHEMA = pa.schema(
    [
        pa.field("body", pa.binary()),
        pa.field("partition", pa.string()),
        pa.field("offset", pa.string()),
        pa.field("sequenceNumber", pa.int64()),
        pa.field("enqueuedTime", pa.timestamp("us", tz="UTC")),
        pa.field("publisher", pa.string()),
        pa.field("partitionKey", pa.string()),
        pa.field("properties", pa.map_(pa.string(), pa.string())),
        pa.field("systemProperties", pa.map_(pa.string(), pa.string())),
    ]
)

# System properties that have columns of their own, or describe the message body itself.
COLUMN_ANNOTATIONS = {b"x-opt-sequence-number", b"x-opt-offset", b"x-opt-enqueued-time", b"x-opt-partition-key"}
