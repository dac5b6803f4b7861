"""The source's own columns as the DDL Spark is told, apart from their Arrow schema: answering ``.load()`` needs
the text only, and Spark's worker for it imports no pyarrow (bench ``load``)."""

from __future__ import annotations

SCHEMA_DDL = (
    "body binary, partition string, offset string, sequenceNumber long, enqueuedTime timestamp, "
    "publisher string, partitionKey string, properties map<string,string>, systemProperties map<string,string>"
)
