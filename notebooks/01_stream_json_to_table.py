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
dbutils.widgets.text("registry", "")  # NAMESPACE.servicebus.windows.net: the last part, JSON Schema from the registry
dbutils.widgets.text("schema_group", "readings")  # a schema group of format Json in that registry
dbutils.widgets.text("ca_file", "")  # a CA bundle to trust (a TLS-inspecting proxy's); empty: the system's
dbutils.widgets.text("authority_host", "")  # Entra's host in a sovereign cloud; empty: Azure's public cloud

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

# COMMAND ----------

# MAGIC %md
# MAGIC ## JSON Schema from the Azure Schema Registry
# MAGIC Producers that use the registry's JSON Schema encoder (`JsonSchemaEncoder` in Python, and its .NET,
# MAGIC Java and JavaScript twins) name each body's schema in its content type,
# MAGIC `application/json;serialization=Json+<schema id>`. With `eventhubs.json.schemaRegistry` the source types
# MAGIC `value` from the registered schema (`eventhubs.json.schemaId`): no sampling, a `date-time` is a timestamp.
# MAGIC The sink writes the other way: a struct column becomes JSON with a schema registered from the column
# MAGIC (`eventhubs.json.schemaGroup`), which the official encoder decodes. The registry takes Microsoft Entra ID
# MAGIC only (a service principal from the secret scope here). Runs when the `registry` widget is set.

# COMMAND ----------

registry_namespace = dbutils.widgets.get("registry")
if registry_namespace:
    scope = dbutils.widgets.get("secret_scope")
    registry = {
        "eventhubs.json.schemaRegistry": registry_namespace,
        "eventhubs.entra.tenantId": dbutils.secrets.get(scope, "tenant-id"),
        "eventhubs.entra.clientId": dbutils.secrets.get(scope, "client-id"),
        "eventhubs.entra.clientSecret": dbutils.secrets.get(scope, "client-secret"),
    }
    if dbutils.widgets.get("authority_host"):
        registry |= {"eventhubs.entra.authorityHost": dbutils.widgets.get("authority_host"),
                     "eventhubs.entra.disableInstanceDiscovery": "true"}  # fmt: skip
    if dbutils.widgets.get("ca_file"):
        registry["eventhubs.connectionVerify"] = dbutils.widgets.get("ca_file")

    # write: the table's rows as registered JSON (the schema, made from the struct, registered once)
    (
        table.where("device is not null")
        .select(F.struct("device", "temperature", "ts").alias("value"))
        .write.format("eventhubs")
        .option("eventhubs.connectionString", connection_string)
        .options(**registry)
        .option("eventhubs.json.schemaGroup", dbutils.widgets.get("schema_group"))
        .mode("append")
        .save()
    )
    # the schema's id travels in each event's content type
    content_type = F.col("systemProperties")["content-type"]
    kinds = (spark.read.format("eventhubs").option("eventhubs.connectionString", connection_string).load()
             .where(content_type.startswith("application/json;serialization=Json+"))
             .select(content_type.alias("kind")).distinct().collect())  # fmt: skip
    schema_id = kinds[0]["kind"].split("+", 1)[1]

    # read: value typed from the registered schema (ts is a timestamp, no to_timestamp needed)
    typed = (
        spark.read.format("eventhubs")
        .option("eventhubs.connectionString", connection_string)
        .options(**registry)
        .option("eventhubs.json.schemaId", schema_id)
        .load()
        .where(content_type == kinds[0]["kind"])
        .select("value.*")
    )
    typed.printSchema()
    display(typed.groupBy("device").agg(F.count("*").alias("readings"), F.max("ts").alias("latest")))
