# Databricks notebook source
# MAGIC %md
# MAGIC # Backfill: a batch read between two enqueued times
# MAGIC
# MAGIC `spark.read.format("eventhubs")` reads from the starting to the ending position of every partition and
# MAGIC stops. Positions by enqueued time are translated to sequence numbers per partition, so the read is
# MAGIC exact: every event enqueued after `start` and no later than `end`. As in azure-event-hubs-spark, an
# MAGIC enqueued time names the first event enqueued strictly after it (`isInclusive` does not apply); a
# MAGIC start reads from that event, an end stops before it.

# COMMAND ----------

dbutils.widgets.text("secret_scope", "eventhubs")
dbutils.widgets.text("start", "2024-05-01T00:00:00Z")
dbutils.widgets.text("end", "2024-05-02T00:00:00Z")

connection_string = dbutils.secrets.get(dbutils.widgets.get("secret_scope"), "connection-string")
start, end = dbutils.widgets.get("start"), dbutils.widgets.get("end")

# COMMAND ----------

import json

from pyspark.sql import functions as F

backfill = (
    spark.read.format("eventhubs")
    .option("eventhubs.connectionString", connection_string)
    .option("eventhubs.startingPosition", json.dumps({"enqueuedTime": start}))
    .option("eventhubs.endingPosition", json.dumps({"enqueuedTime": end}))
    .load()
)

per_minute = (
    backfill.groupBy(F.window("enqueuedTime", "1 minute").alias("minute"))
    .agg(F.count("*").alias("events"), F.min("enqueuedTime").alias("first"), F.max("enqueuedTime").alias("last"))
    .orderBy("minute")
)
display(per_minute)

# COMMAND ----------

display(backfill.groupBy("partition").agg(F.min("sequenceNumber").alias("from"), F.max("sequenceNumber").alias("to"),
                                          F.count("*").alias("events")).orderBy("partition"))
