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
dbutils.widgets.text("run_seconds", "0")  # > 0: run that long, then stop (for a demonstration)

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
queries = [start_query("orders-query-1"), start_query("orders-query-2")]

# COMMAND ----------

import time

from eventhubs_spark.cli import checkpoints_report

if run_seconds > 0:
    time.sleep(run_seconds)
owners = checkpoints_report(connection_string, store_connection_string, container, "$Default")
display(spark.createDataFrame([(r["partition"], r["owner"], str(r["checkpoint"]), str(r["lag"])) for r in owners],
                              "partition string, owner string, checkpoint string, lag string"))

# COMMAND ----------

if run_seconds > 0:
    for q in queries:
        q.stop()
