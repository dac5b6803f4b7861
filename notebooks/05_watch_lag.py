# Databricks notebook source
# MAGIC %md
# MAGIC # Watch how far behind a stream is
# MAGIC
# MAGIC Each trigger, the query's driver works out per partition how far behind the hub the query is: in
# MAGIC events (enqueued but not read yet) and in time (the hub's newest event minus the newest event the
# MAGIC query read). With `eventhubs.checkpointLocation` set to the query's own checkpoint location, it writes
# MAGIC those figures there, a small JSON file per trigger, and this notebook plots them. The same figures are
# MAGIC in the driver's log every trigger and, on Spark 4.2+ (DBR 19+), in each progress report's
# MAGIC `latestOffset` under `"@lag"`. From a terminal: `eventhubs-spark lag --checkpoint-location PATH`.

# COMMAND ----------

dbutils.widgets.text("secret_scope", "eventhubs")
dbutils.widgets.text("output_path", "/tmp/eventhubs/lag_demo")
dbutils.widgets.text("checkpoint_path", "/dbfs/tmp/eventhubs/lag_demo_checkpoint")  # a path the driver writes
dbutils.widgets.text("run_seconds", "60")  # how long to watch before the plots

connection_string = dbutils.secrets.get(dbutils.widgets.get("secret_scope"), "connection-string")
output_path = dbutils.widgets.get("output_path")
checkpoint_path = dbutils.widgets.get("checkpoint_path")
run_seconds = float(dbutils.widgets.get("run_seconds"))

# COMMAND ----------

query = (
    spark.readStream.format("eventhubs")
    .option("eventhubs.connectionString", connection_string)
    .option("eventhubs.startingPosition", '{"offset": "-1"}')
    .option("maxEventsPerTrigger", 5000)  # a small cap, so a backlog takes several batches to read
    .option("eventhubs.checkpointLocation", checkpoint_path)  # the same as the sink's: the lag files go there
    .option("eventhubs.lag.stalledAfter", "5m")  # a partition with events waiting that does not move is named
    .load()
    .selectExpr("cast(body as string) as body", "partition", "sequenceNumber", "enqueuedTime")
    .writeStream.format("parquet")  # on Databricks: .format("delta") or .toTable(...)
    .option("path", output_path)
    .option("checkpointLocation", checkpoint_path)
    .trigger(processingTime="1 second")
    .start()
)

# COMMAND ----------

import time

time.sleep(run_seconds)

# COMMAND ----------

# MAGIC %md
# MAGIC ## Lag per partition, trigger by trigger

# COMMAND ----------

import matplotlib.pyplot as plt

from eventhubs_spark.lag import LagFiles

hub = connection_string.split("EntityPath=")[-1].split(";")[0]
reports = LagFiles(checkpoint_path, hub).reports()
rows = [
    (r.at, p, lag.events, lag.seconds, lag.stalled or "")
    for r in reports
    for p, lag in sorted(r.partitions.items(), key=lambda kv: int(kv[0]))
]
display(spark.createDataFrame(rows, "at timestamp, partition string, events_behind long, seconds_behind double, "
                                    "stalled string"))  # fmt: skip

fig, (events_axis, seconds_axis) = plt.subplots(2, 1, figsize=(9, 5), sharex=True)
for p in sorted({p for _, p, *_ in rows}, key=int):
    mine = [row for row in rows if row[1] == p]
    events_axis.plot([row[0] for row in mine], [row[2] for row in mine], marker=".", label=f"partition {p}")
    seconds_axis.plot([row[0] for row in mine], [row[3] for row in mine], marker=".", label=f"partition {p}")
events_axis.set_ylabel("events behind")
seconds_axis.set_ylabel("seconds behind")
seconds_axis.set_xlabel("trigger")
events_axis.legend(loc="upper right", fontsize="small")
fig.tight_layout()
display(fig)

# COMMAND ----------

# MAGIC %md
# MAGIC ## Now: from the checkpoint and the hub
# MAGIC What `eventhubs-spark lag` prints: the last committed batch, each partition's latest event, the lag,
# MAGIC and any stalled partition with its likely cause.

# COMMAND ----------

from eventhubs_spark.lag.report import lag_report

now = lag_report({"eventhubs.connectionString": connection_string}, checkpoint_path)
display(spark.createDataFrame(
    [(p, v["committed"], v["latest"], v["eventsBehind"], v["secondsBehind"], v["stalled"] or "")
     for p, v in now["partitions"].items()],
    "partition string, committed string, latest string, events_behind long, seconds_behind double, stalled string",
))  # fmt: skip

# COMMAND ----------

query.stop()  # or leave it running and come back to these cells
