# Databricks notebook source
# MAGIC %md
# MAGIC # Stream from Event Hubs and parse JSON bodies into columns
# MAGIC
# MAGIC Reads a hub with `spark.readStream.format("eventhubs")`, with each event's JSON body read into typed
# MAGIC columns by the source itself: the schema is inferred from the first events and kept beside the
# MAGIC checkpoint (`eventhubs.json.schemaLocation`), so no schema is typed by hand, a restart reads with the
# MAGIC same one, and a new field stops the stream once and is read after it starts again (docs: JSON bodies).
# MAGIC A body that is not JSON keeps its text in `_rescued_data`. The rows are appended to a table. The
# MAGIC connection string comes from a secret scope, never from the notebook. Install the connector on the
# MAGIC cluster first (`%pip install eventhubs-spark`).
# MAGIC
# MAGIC Signing in with Microsoft Entra ID instead (`%pip install 'eventhubs-spark[aad]'`): replace the
# MAGIC connection string option with `eventhubs.namespace` (`NAMESPACE.servicebus.windows.net`) and
# MAGIC `eventhubs.name`, plus either `eventhubs.auth=managedIdentity` (the cluster's identity) or a service
# MAGIC principal: `eventhubs.entra.tenantId`, `eventhubs.entra.clientId` and `eventhubs.entra.clientSecret`
# MAGIC from the secret scope. The identity needs the *Azure Event Hubs Data Receiver* role.
# MAGIC
# MAGIC On Spark 4.1 and later (DBR 18+), where you can set the cluster's Spark config, add
# MAGIC `spark.python.unix.domain.socket.enabled true`: each Python task of a small micro-batch then takes
# MAGIC about 10 ms of executor time instead of about 50 (docs: Performance).

# COMMAND ----------

dbutils.widgets.text("secret_scope", "eventhubs")
dbutils.widgets.text("output_path", "/tmp/eventhubs/readings")
dbutils.widgets.text("checkpoint_path", "/tmp/eventhubs/readings_checkpoint")
dbutils.widgets.text("schema_path", "/tmp/eventhubs/readings_schema")  # where the inferred schema is kept
dbutils.widgets.text("available_now", "false")  # "true": read what is there, then stop

connection_string = dbutils.secrets.get(dbutils.widgets.get("secret_scope"), "connection-string")
output_path = dbutils.widgets.get("output_path")
checkpoint_path = dbutils.widgets.get("checkpoint_path")
schema_path = dbutils.widgets.get("schema_path")
available_now = dbutils.widgets.get("available_now") == "true"

# COMMAND ----------

from pyspark.sql import functions as F

events = (
    spark.readStream.format("eventhubs")
    .option("eventhubs.connectionString", connection_string)
    .option("eventhubs.consumerGroup", "$Default")
    .option("eventhubs.startingPosition", '{"offset": "-1"}')  # from the start of the stream
    .option("maxEventsPerTrigger", 10000)
    .option("eventhubs.json.schemaLocation", schema_path)  # JSON bodies into the struct column `value`
    .load()
)
events.printSchema()  # value: the inferred schema; _rescued_data: what did not fit

parsed = events.select(
    # inference keeps text as text: a timestamp is parsed by asking for it
    F.col("value").withField("ts", F.to_timestamp("value.ts")).alias("r"),
    "_rescued_data",
    "partition",
    "sequenceNumber",
    "enqueuedTime",
).select("r.*", "_rescued_data", "partition", "sequenceNumber", "enqueuedTime")

# COMMAND ----------

query = (
    parsed.writeStream.format("parquet")  # on Databricks: .format("delta") or .toTable("readings")
    .option("path", output_path)
    .option("checkpointLocation", checkpoint_path)
    .trigger(**({"availableNow": True} if available_now else {"processingTime": "10 seconds"}))
    .start()
)
if available_now:
    query.awaitTermination()

# COMMAND ----------

# MAGIC %md
# MAGIC ## What arrived
# MAGIC Rows land in the table as each micro-batch commits; a body that is not JSON gives null columns and
# MAGIC keeps its text in `_rescued_data`, not a failure.

# COMMAND ----------

table = spark.read.parquet(output_path)
display(table.groupBy("device").agg(F.count("*").alias("readings"), F.avg("temperature").alias("avg_temperature")))

# COMMAND ----------

# MAGIC %md
# MAGIC ## Events per second and lag, per micro-batch
# MAGIC The connector reports the hub's latest offsets to Spark, so each progress event carries both where
# MAGIC the query is (`endOffset`) and where the hub is (`latestOffset`): their difference is the lag.

# COMMAND ----------

import json

import matplotlib.pyplot as plt


def _total(offset):
    if not offset:
        return 0
    doc = json.loads(offset) if isinstance(offset, str) else offset
    # each hub's positions; "@lag" beside them holds the lag figures themselves (notebook 05 plots those)
    return sum(int(n) for hub, positions in doc.items() if not hub.startswith("@") for n in positions.values())


progress = [p for p in query.recentProgress if p["sources"]]
batches = [p["batchId"] for p in progress]
rate = [p["processedRowsPerSecond"] or 0 for p in progress]
lag = [max(0, _total(p["sources"][0].get("latestOffset")) - _total(p["sources"][0]["endOffset"])) for p in progress]

fig, left = plt.subplots(figsize=(8, 3))
left.bar(batches, rate, color="tab:blue", label="events/s")
left.set_xlabel("micro-batch")
left.set_ylabel("events per second")
right = left.twinx()
right.plot(batches, lag, color="tab:red", marker="o", label="lag (events)")
right.set_ylabel("events behind the hub")
fig.tight_layout()
display(fig)

# COMMAND ----------

if not available_now:
    query.stop()  # or leave it running: it reads new events every 10 seconds
