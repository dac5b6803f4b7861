"""The table of every option: key, default, parser, the modes it applies to, one line of documentation, an example.

Keys are case-insensitive and carry the azure-event-hubs-spark names, so a migration is a package change. The
old connector's keys are answered in :mod:`~eventhubs_spark.options.retired`.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from eventhubs_spark import defaults
from eventhubs_spark.options.connection_specs import CONNECTION_SPECS
from eventhubs_spark.options.parsers import (
    ALL,
    BATCH,
    READ,
    STREAM,
    WRITE,
    choice_of,
    count_at_least,
    parse_address,
    parse_bool,
    parse_capture_location,
    parse_capture_name_format,
    parse_duration,
    parse_fraction,
    parse_json_schema,
    parse_local_location,
    parse_namespace,
    parse_ports,
    parse_size,
    parse_switch,
    parse_text,
    parse_write_id,
    upper_choice_of,
)
from eventhubs_spark.options.spec import Spec
from eventhubs_spark.positions.event_positions import Position, parse_position, parse_positions

_NO_POSITIONS: Mapping[str, Position] = MappingProxyType({})


SPECS: tuple[Spec, ...] = (
    *CONNECTION_SPECS,
    Spec(
        "eventhubs.consumerGroup",
        defaults.CONSUMER_GROUP,
        parse_text,
        "Consumer group to read with (writes with eventhubs.sink.exactlyOnce: to read their own events back with, "
        "after a retried task; never as an exclusive reader).",
        "$Default",
        ALL,
        field="consumer_group",
    ),
    Spec(
        "eventhubs.startingPosition",
        None,
        lambda o, v: parse_position(v, o),
        "Where to start when there is no Spark checkpoint, for every partition (stream default: end of "
        "stream; batch default: start of stream).",
        '{"offset": "-1"}',
        READ,
        field="starting_position",
    ),
    Spec(
        "eventhubs.startingPositions",
        _NO_POSITIONS,
        lambda o, v: parse_positions(v, o),
        "Per-partition starting positions; override eventhubs.startingPosition.",
        '{"0": {"seqNo": 100}}',
        READ,
        field="starting_positions",
    ),
    Spec(
        "eventhubs.endingPosition",
        None,
        lambda o, v: parse_position(v, o),
        "Batch reads: where to stop, for every partition (default: end of stream).",
        '{"offset": "@latest"}',
        frozenset({BATCH}),
        field="ending_position",
    ),
    Spec(
        "eventhubs.endingPositions",
        _NO_POSITIONS,
        lambda o, v: parse_positions(v, o),
        "Batch reads: per-partition ending positions.",
        '{"0": {"seqNo": 500}}',
        frozenset({BATCH}),
        field="ending_positions",
    ),
    Spec(
        "maxEventsPerTrigger",
        None,
        count_at_least(1),
        "Most events per micro-batch, split across partitions by backlog (default on Spark 4.2+: 1000 per partition).",
        "10000",
        frozenset({STREAM}),
        field="max_events_per_trigger",
    ),
    Spec(
        "eventhubs.triggerAvailableNow",
        False,
        parse_bool,
        "Spark 4.0 and 4.1 only (4.2+ tells the source itself): the query runs with Trigger.AvailableNow. There "
        "Spark asks for the end of a run once, so the run reads every event available when it starts in one "
        "batch, not capped by maxEventsPerTrigger (which otherwise makes each run read one capped batch).",
        "true",
        frozenset({STREAM}),
        field="trigger_available_now",
    ),
    Spec(
        "minEventsPerTrigger",
        None,
        count_at_least(1),
        "Skip a trigger until this many events are waiting, or maxTriggerDelay has passed.",
        "500",
        frozenset({STREAM}),
        field="min_events_per_trigger",
    ),
    Spec(
        "maxTriggerDelay",
        defaults.MAX_TRIGGER_DELAY,
        parse_duration,
        "With minEventsPerTrigger: the longest a trigger may be skipped.",
        "15m",
        frozenset({STREAM}),
        field="max_trigger_delay",
    ),
    Spec(
        "failOnDataLoss",
        True,
        parse_bool,
        "Fail when events the query had not read are gone (retention); false logs and goes on.",
        "true",
        READ,
        field="fail_on_data_loss",
    ),
    Spec(
        "maxEventsPerPartition",
        None,
        count_at_least(1),
        "Split a partition's range into Spark tasks of at most this many events.",
        "50000",
        READ,
        field="max_events_per_partition",
    ),
    Spec(
        "eventhubs.prefetchCount",
        defaults.PREFETCH,
        count_at_least(1),
        "Most events each receiver's link has in flight (its credit); fewer when events are large, so they never "
        "stand for more than eventhubs.readAhead.maxBytes.",
        "2000",
        READ,
        field="prefetch_count",
    ),
    Spec(
        "eventhubs.receiverTimeout",
        defaults.RECEIVER_TIMEOUT,
        parse_duration,
        "How long a receiver may wait for an event it knows exists before the task fails.",
        "60s",
        READ,
        field="receiver_timeout",
    ),
    Spec(
        "eventhubs.connectionIdleTimeout",
        defaults.CONNECTION_IDLE_TIMEOUT,
        parse_duration,
        "The receivers' connection, when it receives nothing for this long (the service sends heartbeats at least "
        "twice as often), is taken for dead and opened again: a network that drops packets without closing costs "
        "this long, not a failed task; keep it below eventhubs.receiverTimeout. Every connection's opening and "
        "sign-in (the sink's and management calls' too; a sign-in at least 5 s) and each of the sink's send "
        "attempts wait at most this long for the service's answer, then go on over a new connection. 0 = never "
        "(openings and sign-ins then wait 60 s).",
        "30s",
    ),
    Spec(
        "eventhubs.operationTimeout",
        defaults.OPERATION_TIMEOUT,
        parse_duration,
        "Deadline for management calls and sends, retries included.",
        "300s",
        field="operation_timeout",
    ),
    Spec(
        "eventhubs.retry.maxAttempts",
        defaults.RETRY_MAX_ATTEMPTS,
        count_at_least(0),
        "Most attempts of any one operation (a send, a management call, a position lookup, a receiver's reopens "
        "without progress); 0 = as many as its deadline (operationTimeout, receiverTimeout) allows.",
        "10",
    ),
    Spec(
        "eventhubs.retry.initialDelay",
        defaults.RETRY_INITIAL_DELAY,
        parse_duration,
        "The first wait before another attempt; each further wait doubles, up to eventhubs.retry.maxDelay.",
        "200ms",
    ),
    Spec(
        "eventhubs.retry.maxDelay",
        defaults.RETRY_MAX_DELAY,
        parse_duration,
        "The longest wait between two attempts.",
        "5s",
    ),
    Spec(
        "eventhubs.retry.jitter",
        defaults.RETRY_JITTER,
        parse_fraction,
        "Each wait is shortened at random by up to this fraction, so many tasks do not retry in step (0 to 1).",
        "0.5",
    ),
    Spec(
        "eventhubs.useExclusiveReceiver",
        defaults.EXCLUSIVE_RECEIVER,
        parse_bool,
        "Owner-level (epoch) receivers, so one reader per partition and consumer group.",
        "true",
        READ,
        field="use_exclusive_receiver",
    ),
    Spec(
        "eventhubs.minEventsPerTask",
        defaults.MIN_EVENTS_PER_TASK,
        count_at_least(0),
        "A task's worth of events: a partition's range of a micro-batch (or batch read) this big is a Spark task of "
        "its own; smaller ranges share tasks of about this many events (in partition order, at least one task a "
        "partition home, each of one home's ranges, read at once within the task), so a quiet micro-batch runs "
        "a few tasks instead of one per partition (every Python task costs Spark "
        "tens of milliseconds whatever it reads). A batch run again is packed as its first run was. 0 (as the old "
        "connector): one Spark partition per Event Hubs partition, whatever its size.",
        "0",
        READ,
        field="min_events_per_task",
    ),
    Spec(
        "eventhubs.maxPartitionsPerTask",
        defaults.MAX_PARTITIONS_PER_TASK,
        count_at_least(1),
        "At most this many Event Hubs partitions share one Spark task (see eventhubs.minEventsPerTask; a task reads "
        "8 of its ranges at once). By default the events decide: a quiet micro-batch of a 1,024-partition hub "
        "(Dedicated) runs as few tasks as it has a task's worth of events; a lower bound spreads such a batch over "
        "more tasks.",
        "64",
        READ,
        field="max_partitions_per_task",
    ),
    Spec(
        "eventhubs.receiverService",
        None,
        parse_switch,
        "Read through one receiver service per executor, which keeps receivers (and what they read ahead) "
        "between micro-batches whichever Python worker runs the next task. auto (the default): streams do, batch "
        "reads do not (one range per partition: nothing to keep); on (or true): batch reads too; off (or false): "
        "each worker reads for itself and no process outlives a task. Where the service cannot start (a "
        "sandbox), tasks read in their worker, said once, and it is tried again in the background every minute.",
        "off",
        READ,
        field="receiver_service",
    ),
    Spec(
        "eventhubs.partitionHomes",
        defaults.PARTITION_HOMES,
        parse_bool,
        "Streams: each partition is read from Event Hubs by one executor's receiver service, its home (a balanced "
        "placement over the live executors), and a task Spark runs elsewhere reads its range from the home over "
        "an authenticated, encrypted connection; false: each executor's service reads the partitions whose tasks "
        "it gets (on several executors, the namespace then sends events more than once).",
        "false",
        frozenset({STREAM}),
        field="partition_homes",
    ),
    Spec(
        "eventhubs.executorPorts",
        defaults.EXECUTOR_PORTS,
        parse_ports,
        "Where a home's receiver service listens for other executors' tasks: a port or a range of them, below the "
        "ephemeral ports (32768-60999 on Linux), where other connections' ports may already be; 0: any free port "
        "(two services on one host never clash).",
        "20000-20099",
        frozenset({STREAM}),
        field="executor_ports",
    ),
    Spec(
        "eventhubs.executorBindAddress",
        defaults.BIND_ADDRESS,
        parse_address,
        "The address a home's receiver service listens on for other executors' tasks (and tells the driver); "
        "0.0.0.0: every address of the host. With eventhubs.partitionHomes=false no executor listens at all.",
        "10.0.0.5",
        frozenset({STREAM}),
        field="executor_bind_address",
    ),
    Spec(
        "eventhubs.driverChannel",
        defaults.DRIVER_CHANNEL,
        parse_bool,
        "Streams: the driver listens on a TCP port for what executors tell it (receiver services that serve the "
        "query, the lag figures' times, which partition's home a first batch's task has). false: the driver opens "
        "no port and no task connects to it: partitions get no home (eventhubs.partitionHomes needs the channel) "
        "and the lag figures have no seconds, only events. Where executors cannot reach the driver, each finds "
        "it out once (within 2 s) and asks no more, checking again every minute.",
        "false",
        frozenset({STREAM}),
        field="driver_channel",
    ),
    Spec(
        "eventhubs.driverChannel.bindAddress",
        defaults.BIND_ADDRESS,
        parse_address,
        "The address the driver's channel listens on (and tells the executors); 0.0.0.0: every address of the host.",
        "10.0.0.4",
        frozenset({STREAM}),
        field="driver_bind_address",
    ),
    Spec(
        "eventhubs.driverChannel.ports",
        defaults.EXECUTOR_PORTS,
        parse_ports,
        "The port, or a range of ports, the driver's channel listens on (a firewall's opening); 0: any free port.",
        "21000-21009",
        frozenset({STREAM}),
        field="driver_ports",
    ),
    Spec(
        "eventhubs.checkpointLocation",
        None,
        parse_local_location,
        "The query's own checkpoint location (writeStream's checkpointLocation, which Spark does not tell a "
        "Python source): the driver writes each trigger's lag figures under eventhubs-lag/ there, with the "
        "query's options less their secrets, for `eventhubs-spark lag --checkpoint-location` and the notebooks. "
        "A local path, file: or dbfs:/ (through /dbfs); unset: the figures go to the driver's log (and the "
        "progress's latestOffset on Spark 4.2+) only. Writes with eventhubs.sink.exactlyOnce: where the sink "
        "keeps, under eventhubs-sink/, each batch's fence and its tasks' marks (a path every executor reaches).",
        "/dbfs/checkpoints/telemetry",
        frozenset({STREAM, WRITE}),
        field="checkpoint_location",
    ),
    Spec(
        "eventhubs.lag.stalledAfterBatches",
        defaults.STALLED_AFTER_BATCHES,
        count_at_least(1),
        "A partition with events waiting that this many micro-batches in a row did not move is called stalled "
        "(by name, with the likely cause, in the driver's log and the lag figures).",
        "20",
        frozenset({STREAM}),
        field="stalled_after_batches",
    ),
    Spec(
        "eventhubs.lag.stalledAfter",
        defaults.STALLED_AFTER,
        parse_duration,
        "A partition with events waiting that has not moved for this long is called stalled, however few "
        "micro-batches ran meanwhile.",
        "10m",
        frozenset({STREAM}),
        field="stalled_after",
    ),
    Spec(
        "eventhubs.lag.progressPartitions",
        defaults.LAG_PROGRESS_PARTITIONS,
        count_at_least(1),
        "Most partitions whose events and seconds behind a progress report's lag figures (Spark 4.2+) show: past "
        "it, those furthest behind (stalled ones first) and a note saying so; the summary, the stalled list, the "
        "lag files and `eventhubs-spark lag` keep every partition. Spark copies the report into each progress "
        "event: at 1,024 partitions the whole maps are 26 KB a trigger and half of latestOffset's time.",
        "1024",
        frozenset({STREAM}),
        field="lag_progress_partitions",
    ),
    Spec(
        "eventhubs.readAhead.maxEvents",
        defaults.READ_AHEAD_EVENTS,
        count_at_least(1),
        "Most events a receiver reads ahead of its tasks, per partition (between micro-batches, in memory).",
        "2000",
        READ,
        field="read_ahead_events",
    ),
    Spec(
        "eventhubs.readAhead.maxBytes",
        defaults.READ_AHEAD_BYTES,
        parse_size,
        "Most bytes of event bodies a receiver reads ahead of its tasks, per partition.",
        "8MB",
        READ,
        field="read_ahead_bytes",
    ),
    Spec(
        "eventhubs.partitionDiscoveryInterval",
        defaults.PARTITION_DISCOVERY_INTERVAL,
        parse_duration,
        "How often a stream looks for partitions added to the hub (once its executors say where partitions end, "
        "it looks on a thread of its own, and reads an added partition from the trigger after the answer).",
        "60s",
        frozenset({STREAM}),
        field="partition_discovery_interval",
    ),
    Spec(
        "eventhubs.checkpointStore.connectionString",
        None,
        parse_text,
        "Blob storage connection string: mirror each committed batch into the checkpoint store every Event Hubs "
        "SDK shares.",
        "DefaultEndpointsProtocol=https;AccountName=ACCOUNT;AccountKey=KEY",
        READ,
        secret=True,
        field="store.connection_string",
    ),
    Spec(
        "eventhubs.checkpointStore.accountUrl",
        None,
        parse_text,
        "Instead of the connection string: the storage account's blob URL, with eventhubs.checkpointStore.sasToken "
        "or, without one, Microsoft Entra ID: the eventhubs.entra.* identity, else DefaultAzureCredential.",
        "https://ACCOUNT.blob.core.windows.net",
        READ,
        field="store.account_url",
    ),
    Spec(
        "eventhubs.checkpointStore.sasToken",
        None,
        parse_text,
        "A SAS token for eventhubs.checkpointStore.accountUrl (read, write, list, create on the container).",
        "sv=2022-11-02&ss=b&srt=co&sp=rwlc&se=2030-01-01T00:00:00Z&sig=SIGNATURE",
        READ,
        secret=True,
        field="store.sas_token",
    ),
    Spec(
        "eventhubs.checkpointStore.container",
        None,
        parse_text,
        "Blob container of the checkpoint store (one per consumer group is usual).",
        "eventhubs-checkpoints",
        READ,
        field="store.container",
    ),
    Spec(
        "eventhubs.capture.location",
        None,
        lambda option, value: parse_capture_location(option, value),
        "Where the hub's Event Hubs Capture writes its Avro files (the container, or a local folder): a read starts "
        "there for events the hub no longer holds and goes on in the hub from its first retained event, each event "
        "once. Sign-in as the checkpoint store's.",
        "abfss://capture@ACCOUNT.dfs.core.windows.net",
        READ,
        field="capture.location",
    ),
    Spec(
        "eventhubs.capture.nameFormat",
        "{Namespace}/{EventHub}/{PartitionId}/{Year}/{Month}/{Day}/{Hour}/{Minute}/{Second}",
        lambda option, value: parse_capture_name_format(option, value),
        "The Capture's archiveNameFormat (all nine tokens); its files end in .avro.",
        "{Namespace}/{EventHub}/p{PartitionId}/{Year}-{Month}-{Day}/{Hour}-{Minute}-{Second}",
        READ,
        field="capture.name_format",
    ),
    Spec(
        "eventhubs.capture.namespace",
        None,
        parse_text,
        "The value of {Namespace} in the file names (default: the namespace's name, ns of ns.servicebus.windows.net).",
        "contoso-events",
        READ,
        field="capture.namespace",
    ),
    Spec(
        "eventhubs.capture.connectionString",
        None,
        parse_text,
        "Storage connection string for eventhubs.capture.location (else eventhubs.capture.sasToken, else the hub's "
        "Microsoft Entra identity).",
        "DefaultEndpointsProtocol=https;AccountName=ACCOUNT;AccountKey=KEY",
        READ,
        secret=True,
        field="capture.connection_string",
    ),
    Spec(
        "eventhubs.capture.sasToken",
        None,
        parse_text,
        "A SAS token for eventhubs.capture.location (read and list on the container).",
        "sv=2022-11-02&ss=b&srt=co&sp=rl&se=2030-01-01T00:00:00Z&sig=SIGNATURE",
        READ,
        secret=True,
        field="capture.sas_token",
    ),
    Spec(
        "eventhubs.capture.lateFileWait",
        60.0,
        parse_duration,
        "How long a read waits for a Capture file that fills a gap (written late, after a storage outage) before "
        "it calls the gap (failOnDataLoss decides what then).",
        "5m",
        READ,
        field="capture.late_file_wait",
    ),
    Spec(
        "eventhubs.startFromCheckpointStore",
        False,
        parse_bool,
        "With no Spark checkpoint yet, start each partition after its checkpoint in the store (partitions without "
        "one use eventhubs.startingPosition(s)).",
        "true",
        READ,
        field="start_from_checkpoint_store",
    ),
    Spec(
        "eventhubs.ownership",
        False,
        parse_bool,
        "Share the consumer group with other queries and processors: read only the partitions this query owns in "
        "the checkpoint store, balancing them with the other owners (needs the checkpoint store).",
        "true",
        frozenset({STREAM}),
        field="ownership",
    ),
    Spec(
        "eventhubs.ownerId",
        None,
        parse_text,
        "This query's owner id in the checkpoint store (default: random per run). A stable one lets a restarted "
        "query take its partitions back at once.",
        "orders-query-1",
        frozenset({STREAM}),
        field="ownership.owner_id",
    ),
    Spec(
        "eventhubs.loadBalancing.strategy",
        defaults.LOAD_BALANCING_STRATEGY,
        choice_of("greedy", "balanced"),
        "greedy claims a fair share at once; balanced claims one partition per cycle (the SDKs' default).",
        "balanced",
        frozenset({STREAM}),
        field="ownership.strategy",
    ),
    Spec(
        "eventhubs.loadBalancing.updateInterval",
        defaults.LOAD_BALANCING_INTERVAL,
        parse_duration,
        "How often ownership is renewed and rebalanced.",
        "10s",
        frozenset({STREAM}),
        field="ownership.update_interval",
    ),
    Spec(
        "eventhubs.loadBalancing.ownershipExpiration",
        defaults.OWNERSHIP_EXPIRATION,
        parse_duration,
        "How long an ownership not renewed stays valid; a stopped query's partitions are taken over after it.",
        "60s",
        frozenset({STREAM}),
        field="ownership.expiration",
    ),
    Spec(
        "eventhubs.loadBalancing.maxPartitions",
        None,
        count_at_least(1),
        "The most partitions this query owns at once.",
        "8",
        frozenset({STREAM}),
        field="ownership.max_partitions",
    ),
    Spec(
        "eventhubs.avro.schemaRegistry",
        None,
        parse_namespace,
        "Read or write Avro bodies through this namespace's Schema Registry (the official encoders' format: content "
        "type avro/binary+<schema id>). Reads add a struct column value; writes take one. The registry takes "
        "Microsoft Entra ID only (eventhubs.auth / eventhubs.entra.*), even when the hub uses a connection string.",
        "NAMESPACE.servicebus.windows.net",
        field="avro_registry",
    ),
    Spec(
        "eventhubs.avro.schema",
        None,
        parse_text,
        "Reads: the reader schema (Avro JSON): the value column's type, each event's writer schema resolved to it "
        "by Avro's rules. Writes: the schema to register and write with (default: made from the value column).",
        '{"type": "record", "name": "Reading", "fields": [{"name": "id", "type": "long"}]}',
        field="avro_schema",
    ),
    Spec(
        "eventhubs.avro.schemaId",
        None,
        parse_text,
        "Reads: the reader schema by its id in the registry, instead of eventhubs.avro.schema.",
        "0f5ebc3e0b0c4c2f8d0c1f7f1b0f9e41",
        READ,
        field="avro_schema_id",
    ),
    Spec(
        "eventhubs.avro.mode",
        defaults.AVRO_MODE,
        upper_choice_of("FAILFAST", "PERMISSIVE"),
        "A body that cannot be read with the reader schema: FAILFAST fails the query naming the partition, sequence "
        "number and schema id; PERMISSIVE gives a null value and fills the corrupt-record column.",
        "PERMISSIVE",
        READ,
        field="avro_mode",
    ),
    Spec(
        "eventhubs.avro.corruptRecordColumn",
        defaults.AVRO_CORRUPT_COLUMN,
        parse_text,
        "PERMISSIVE reads: the column holding a bad record's body and error (struct<body binary, error string>).",
        "_bad_avro",
        READ,
        field="avro_corrupt_column",
    ),
    Spec(
        "eventhubs.json.schema",
        None,
        parse_json_schema,
        "Read JSON bodies into a struct column value with this fixed schema (Spark DDL, or a schema's JSON); what "
        "does not fit goes by eventhubs.json.schemaEvolutionMode (default rescue). Types: bigint, int, double, "
        "boolean, string, timestamp and date (parsed from ISO 8601 text), struct<...>, array<...>.",
        "id bigint, device string, reading struct<temp:double, at:timestamp>",
        READ,
        field="json_schema",
    ),
    Spec(
        "eventhubs.json.schemaLocation",
        None,
        parse_local_location,
        "Read JSON bodies with a schema inferred from a sample of the events the query reads first (all "
        "partitions, eventhubs.json.sampleEvents), kept here with its versions (_schemas/) so a restart reads with "
        "the same one; a path every executor reaches. Timestamps stay strings unless eventhubs.json.schema says "
        "otherwise.",
        "/dbfs/checkpoints/telemetry/json-schema",
        READ,
        field="json_schema_location",
    ),
    Spec(
        "eventhubs.json.schemaEvolutionMode",
        None,
        choice_of("addNewColumns", "rescue", "failOnNewColumns", "none"),
        "Events with fields or types the schema lacks: addNewColumns (with a schema location: record a new schema "
        "version and stop the stream, which reads them when started again), rescue (into the rescue column), "
        "failOnNewColumns (fail, naming the partition and sequence number), none (ignore new fields; values of "
        "another type rescued). Default: addNewColumns with a schema location, rescue with a fixed schema.",
        "rescue",
        READ,
        field="json_mode",
    ),
    Spec(
        "eventhubs.json.rescuedDataColumn",
        defaults.JSON_RESCUE_COLUMN,
        parse_text,
        "The column holding, as JSON text, what of a body did not fit the schema (a body that is not a JSON object: "
        '{"_body": its text}).',
        "_bad_json",
        READ,
        field="json_rescue_column",
    ),
    Spec(
        "eventhubs.json.keepBody",
        False,
        parse_bool,
        "Keep the body column beside value in a JSON read. Off by default: Spark gives a Python source no column "
        "pruning, so the raw body would travel to the JVM with every batch beside its parsed value (about a "
        "twentieth of a 2 KB read's time); a body that does not fit keeps its text in the rescue column either way.",
        "true",
        READ,
        field="json_keep_body",
    ),
    Spec(
        "eventhubs.json.sampleEvents",
        defaults.JSON_SAMPLE_EVENTS,
        count_at_least(1),
        "Inference: at most this many events in all, spread over the partitions, from where the query starts "
        "(a stream starting at the end: the latest events).",
        "5000",
        READ,
        field="json_sample_events",
    ),
    Spec(
        "eventhubs.json.schemaRegistry",
        None,
        parse_namespace,
        "Read or write JSON bodies whose schema is in this namespace's Schema Registry (the official JSON Schema "
        "encoder's format: content type application/json;serialization=Json+<schema id>). Reads type the value column "
        "from the registered schema (eventhubs.json.schemaId), no sampling; writes register one made from the value "
        "column (eventhubs.json.schemaGroup). The registry takes Microsoft Entra ID only (eventhubs.auth / "
        "eventhubs.entra.*).",
        "NAMESPACE.servicebus.windows.net",
        field="json_registry",
    ),
    Spec(
        "eventhubs.json.schemaId",
        None,
        parse_text,
        "With eventhubs.json.schemaRegistry. Reads: the registered JSON Schema the value column is typed from (bodies "
        "of other versions are read into it by field name; what it lacks goes by eventhubs.json.schemaEvolutionMode). "
        "Writes: send with this registered schema instead of registering one made from the value column.",
        "0f5ebc3e0b0c4c2f8d0c1f7f1b0f9e41",
        field="json_schema_id",
    ),
    Spec(
        "eventhubs.json.validate",
        False,
        parse_bool,
        "With eventhubs.json.schemaRegistry: check each body against the JSON Schema its content type names (reads: "
        "a body that does not validate has a null value and its text and the reason in the rescue column; writes: the "
        "write fails naming the row). Off by default: it parses every body a second time in Python (see json.md).",
        "true",
        field="json_validate",
    ),
    Spec(
        "eventhubs.json.schemaGroup",
        None,
        parse_text,
        "Writes: the registry's schema group (format Json) the value column's JSON Schema is registered in, once per "
        "query.",
        "telemetry-schemas",
        frozenset({WRITE}),
        field="json_group",
    ),
    Spec(
        "eventhubs.json.schemaName",
        None,
        parse_text,
        "Writes: the name (the JSON Schema's title) the value column's schema is registered under; default: the event "
        "hub's name.",
        "Reading",
        frozenset({WRITE}),
        field="json_schema_name",
    ),
    Spec(
        "eventhubs.sink.exactlyOnce",
        False,
        parse_bool,
        "Writes: store every row once whatever Spark retries (tasks, lost executors, a restarted driver), for a "
        "query whose rows are deterministic; each event carries the application property eventhubs-spark-stamp "
        "(write/batch/partition/row). Needs eventhubs.checkpointLocation, and for df.write eventhubs.sink.writeId.",
        "true",
        frozenset({WRITE}),
        field="exactly_once",
    ),
    Spec(
        "eventhubs.sink.writeId",
        None,
        parse_write_id,
        "df.write with eventhubs.sink.exactlyOnce: the write's name, the same when the same job runs again (its rows "
        "already stored are not sent again); letters, digits, '.', '_', '-'.",
        "orders-2026-11-28",
        frozenset({WRITE}),
        field="write_id",
    ),
    Spec(
        "eventhubs.avro.schemaGroup",
        None,
        parse_text,
        "Writes: the registry's schema group (format Avro) the value column's schema is registered in, once per query.",
        "telemetry-schemas",
        frozenset({WRITE}),
        field="avro_group",
    ),
    Spec(
        "eventhubs.avro.recordName",
        defaults.AVRO_RECORD_NAME,
        parse_text,
        "Writes: the record name (and the registry's schema name, with the namespace) of a schema made from the value "
        "column, as Spark's to_avro names it.",
        "Reading",
        frozenset({WRITE}),
        field="avro_record_name",
    ),
    Spec(
        "eventhubs.avro.recordNamespace",
        None,
        parse_text,
        "Writes: the namespace of a schema made from the value column.",
        "com.contoso.telemetry",
        frozenset({WRITE}),
        field="avro_record_namespace",
    ),
)


BY_KEY = {spec.key.lower(): spec for spec in SPECS}


SPARK_OWNED = {"checkpointlocation"}
