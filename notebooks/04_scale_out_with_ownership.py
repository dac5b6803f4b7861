# Databricks notebook source
# MAGIC %md
# MAGIC # Scale out: several queries share one consumer group
# MAGIC
# MAGIC With `eventhubs.ownership=true` each query reads only the partitions it owns in the blob checkpoint
# MAGIC store (the same store and layout Event Hubs processors use) and the partitions are balanced among
# MAGIC the queries. Start the same notebook on another cluster and the partitions split; stop one and the
# MAGIC others take its partitions over after the ownership expiration.

# COMMAND ----------

dbutils.widgets.text("secret_scope", "eventhubs")
dbutils.widgets.text("container", "orders-checkpoints")
dbutils.widgets.text("output_path", "/tmp/eventhubs/scale_out")
dbutils.widgets.text("run_seconds", "0")  # > 0: run until split and read (at most that long), then stop

scope = dbutils.widgets.get("secret_scope")
connection_string = dbutils.secrets.get(scope, "connection-string")
store_connection_string = dbutils.secrets.get(scope, "checkpoint-store-connection-string")
container = dbutils.widgets.get("container")
output_path = dbutils.widgets.get("output_path")
run_seconds = float(dbutils.widgets.get("run_seconds"))

# COMMAND ----------


def start_query(owner_id):
    return (
        spark.readStream.format("eventhubs")
        .option("eventhubs.connectionString", connection_string)
        .option("eventhubs.checkpointStore.connectionString", store_connection_string)
        .option("eventhubs.checkpointStore.container", container)
        .option("eventhubs.ownership", "true")
        .option("eventhubs.ownerId", owner_id)  # stable across restarts: a restart takes its partitions back
        .option("eventhubs.loadBalancing.updateInterval", "2s")
        .option("eventhubs.loadBalancing.ownershipExpiration", "10s")
        .option("eventhubs.startingPosition", '{"offset": "-1"}')
        .load()
        .selectExpr("cast(body as string) as body", "partition", "sequenceNumber")
        .writeStream.format("parquet")
        .option("path", f"{output_path}/{owner_id}")
        .option("checkpointLocation", f"{output_path}/_checkpoints/{owner_id}")
        .trigger(processingTime="1 second")
        .start()
    )


# Two queries here for the demonstration; in production, one per cluster or job.
owner_ids = ["orders-query-1", "orders-query-2"]
queries = [start_query(owner_id) for owner_id in owner_ids]

# COMMAND ----------

import collections
import time

from eventhubs_spark.checkpoints.report import checkpoints_report


def split_and_read(report):
    """Each query owns its share (counts differ by at most one) and has checkpointed its partitions' last event.

    The queries balance one partition per update interval, so how long that takes depends on when each
    query's first batch ran: wait for it rather than for a fixed time."""
    per_owner = collections.Counter(r["owner"] for r in report)
    return (
        set(per_owner) == set(owner_ids)
        and max(per_owner.values()) - min(per_owner.values()) <= 1
        and all(r["lag"] in ("", 0) for r in report)
    )


deadline = time.monotonic() + run_seconds
# Each query claims partitions (and creates the store's container) in its first batch.
while any(q.isActive and q.lastProgress is None for q in queries):
    time.sleep(1)
while True:
    owners = checkpoints_report(connection_string, store_connection_string, container, "$Default")
    if run_seconds <= 0 or split_and_read(owners) or time.monotonic() >= deadline:
        break
    time.sleep(1)
display(spark.createDataFrame([(r["partition"], r["owner"], str(r["checkpoint"]), str(r["lag"])) for r in owners],
                              "partition string, owner string, checkpoint string, lag string"))

# COMMAND ----------

if run_seconds > 0:
    for q in queries:
        q.stop()
