"""Every default of an option, once.

The option table (:mod:`eventhubs_spark.options`) shows and applies them, and the plain-data configs that carry
an option's value (the receivers', the load balancer's) default to the same constant, so a config built without
the options never disagrees with the table. Nothing here is read from the environment: what differs per query
comes in through the options."""

from __future__ import annotations

CONSUMER_GROUP = "$Default"
PREFETCH = 2000  # events each receiver's link may have in flight (its credit; fewer when they are large)
RECEIVER_TIMEOUT = 60.0  # seconds a receiver may wait for an event it knows exists
CONNECTION_IDLE_TIMEOUT = 30.0  # seconds without a frame (the service's heartbeats included): the connection is dead
OPERATION_TIMEOUT = 300.0  # seconds for management calls and sends, retries included
EXCLUSIVE_RECEIVER = True  # owner-level (epoch) receivers
READ_AHEAD_EVENTS = 2000  # per partition, held between micro-batches
READ_AHEAD_BYTES = 8 * 1024 * 1024
EVENTS_PER_PARTITION = 1000  # Spark 4.2+: the default read limit is this many events per partition
MAX_TRIGGER_DELAY = 900.0  # seconds a trigger may be skipped for minEventsPerTrigger
PARTITION_DISCOVERY_INTERVAL = 60.0
# A task's worth of events: a range this big is a Spark task of its own; smaller ones share tasks of about this many
# (0: one task per Event Hubs partition, as the old connector). Every Python task costs Spark tens of milliseconds
# whatever it reads; bench partitions measures the default against Spark's Kafka source.
MIN_EVENTS_PER_TASK = 5_000
MAX_PARTITIONS_PER_TASK = 1024  # ranges one shared task reads (RANGE_READERS of them at once): the events decide
LOAD_BALANCING_STRATEGY = "greedy"
LOAD_BALANCING_INTERVAL = 10.0
OWNERSHIP_EXPIRATION = 60.0
# The one retry policy (eventhubs.retry.*): waits doubling from the first to the longest, each shortened by
# up to the jitter fraction at random; 0 attempts: as many as the operation's deadline allows.
RETRY_MAX_ATTEMPTS = 0
RETRY_INITIAL_DELAY = 0.1
RETRY_MAX_DELAY = 2.0
RETRY_JITTER = 0.2
PARTITION_HOMES = True  # streams read each partition at its home executor (eventhubs.partitionHomes)
EXECUTOR_PORTS = "0"  # where a home listens for other executors: any free port (the driver's channel too)
BIND_ADDRESS = "0.0.0.0"  # the address homes and the driver's channel listen on: all of the host's
DRIVER_CHANNEL = True  # a stream's driver listens for what its executors tell it (eventhubs.driverChannel)
STALLED_AFTER_BATCHES = 10  # a partition with events waiting that no batch moved this many times is stalled...
STALLED_AFTER = 300.0  # ...or that has not moved for this many seconds (eventhubs.lag.*)
LAG_PROGRESS_PARTITIONS = 100  # partitions a progress report's lag maps show at most: a Premium hub's whole

# eventhubs.avro.*: what a body that cannot be read does, where PERMISSIVE puts it (Spark's readers' names), and
# the record a schema made from a struct column is named (Spark's to_avro's name)
AVRO_MODE = "FAILFAST"
AVRO_CORRUPT_COLUMN = "_corrupt_record"
AVRO_RECORD_NAME = "topLevelRecord"

JSON_RESCUE_COLUMN = "_rescued_data"  # eventhubs.json.rescuedDataColumn: as Auto Loader names its own
JSON_SAMPLE_EVENTS = 1000  # eventhubs.json.sampleEvents: events sampled to infer a JSON schema, in all
