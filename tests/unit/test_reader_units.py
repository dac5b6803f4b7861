"""Reader pieces that need nothing running: options, positions, offsets, rate limits, the receiver pool."""

from __future__ import annotations

import datetime as dt
import pickle

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from eventhubs_spark.auth.settings import parse_connection_string
from eventhubs_spark.errors import OptionError
from eventhubs_spark.executor.receiver_pool import ReceiverPool
from eventhubs_spark.interprocess.task_ranges import ReceiverConfig
from eventhubs_spark.options import SPECS, options_table, parse_duration, parse_options
from eventhubs_spark.planning.offset_ranges import Range, SourceOffset, rate_limit, split_ranges
from eventhubs_spark.positions.event_positions import (
    Earliest,
    EnqueuedTime,
    Latest,
    Offset,
    SequenceNumber,
    parse_position,
    parse_positions,
)
from eventhubs_spark.process.runtime import current

CONN = "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=n;SharedAccessKey=TOPSECRET;EntityPath=hub"


# --- positions -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"offset": "-1"}', Earliest()),
        ('{"offset": "@latest"}', Latest()),
        ('{"offset": "1234", "isInclusive": true}', Offset("1234", True)),
        ('{"seqNo": 42}', SequenceNumber(42, True)),
        ('{"seqNo": 0, "isInclusive": true}', SequenceNumber(0, True)),
        ('{"enqueuedTime": "2024-05-01T00:00:00Z"}', EnqueuedTime(dt.datetime(2024, 5, 1, tzinfo=dt.timezone.utc))),
        # the old connector wrote every field, unused ones null (seqNo -1)
        ('{"offset": null, "seqNo": 7, "enqueuedTime": null, "isInclusive": false}', SequenceNumber(7, False)),
        ('{"offset": "-1", "seqNo": -1, "enqueuedTime": null, "isInclusive": true}', Earliest()),
        ('{"Offset": "-1"}', Earliest()),
    ],
)
def test_positions(text, expected):
    assert parse_position(text, "eventhubs.startingPosition") == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("not json", "not valid JSON"),
        ("[1]", "expected a JSON object"),
        ("{}", "set exactly one of"),
        ('{"offset": "-1", "seqNo": 4}', "set exactly one of"),
        ('{"seqNo": -5}', "seqNo must be a whole number"),
        ('{"seqNo": "ten"}', "seqNo must be a whole number"),
        ('{"offset": "abc"}', "offset must be"),
        ('{"enqueuedTime": "yesterday"}', "ISO-8601"),
        ('{"seqNo": 1, "isInclusive": "yes"}', "isInclusive must be"),
        ('{"sequence": 1}', "unknown field"),
    ],
)
def test_bad_positions_name_the_option_and_show_an_example(text, message):
    with pytest.raises(OptionError, match=message) as info:
        parse_position(text, "eventhubs.startingPosition")
    assert "eventhubs.startingPosition" in str(info.value)
    assert "{" in str(info.value)  # an example


def test_per_partition_positions_accept_old_connector_keys():
    parsed = parse_positions(
        '{"0": {"seqNo": 1}, "{\\"ehName\\": \\"hub\\", \\"partitionId\\": 3}": {"offset": "-1"}}', "o"
    )
    assert parsed == {"0": SequenceNumber(1), "3": Earliest()}
    with pytest.raises(OptionError, match="partition ids"):
        parse_positions('{"zero": {"seqNo": 1}}', "o")


@given(st.integers(min_value=0, max_value=2**62), st.booleans())
def test_sequence_positions_round_trip(seq, inclusive):
    pos = SequenceNumber(seq, inclusive)
    assert parse_position(pos.to_json(), "o") == pos


# --- options ---------------------------------------------------------------------------------------


def test_options_are_case_insensitive_and_typed():
    options = parse_options(
        {
            "EVENTHUBS.CONNECTIONSTRING": CONN,
            "maxeventspertrigger": "500",
            "eventhubs.receiverTimeout": "PT30S",
            "failOnDataLoss": "FALSE",
        },
        "stream",
    )
    assert options.settings.connection_string.reveal() == CONN and options.settings.hub == "hub"
    assert options.max_events_per_trigger == 500
    assert options.receiver_timeout == 30.0
    assert options.fail_on_data_loss is False
    assert options.consumer_group == "$Default"
    assert isinstance(options.default_start, Latest) and options.starting_position is None
    batch = parse_options({"eventhubs.connectionString": CONN}, "batch")
    assert isinstance(batch.default_start, Earliest)


@pytest.mark.parametrize(
    ("raw", "mode", "message"),
    [
        ({}, "stream", r"eventhubs.connectionString \(or eventhubs.namespace\) is required"),
        ({"eventhubs.conectionString": CONN}, "stream", "unknown option"),
        ({"maxEventsPerTrigger": "lots"}, "stream", "maxEventsPerTrigger: expected a whole number"),
        ({"maxEventsPerTrigger": "0"}, "stream", "maxEventsPerTrigger"),
        ({"eventhubs.prefetchCount": "-1"}, "stream", "eventhubs.prefetchCount"),
        ({"failOnDataLoss": "maybe"}, "stream", "failOnDataLoss: expected true or false"),
        ({"eventhubs.receiverTimeout": "soon"}, "stream", "eventhubs.receiverTimeout: expected a duration"),
        ({"maxTriggerDelay": "5 fortnights"}, "stream", "maxTriggerDelay"),
        ({"eventhubs.endingPosition": '{"offset": "@latest"}'}, "stream", "applies to batch reads"),
        ({"maxEventsPerTrigger": "10"}, "batch", "applies to streaming reads"),
        ({"eventhubs.startingPosition": "{"}, "stream", "eventhubs.startingPosition: not valid JSON"),
        ({"eventhubs.maxSilentTime": "PT60S"}, "stream", "not supported"),
        ({"minEventsPerTrigger": "100", "maxEventsPerTrigger": "10"}, "stream", "must not exceed"),
        ({"path": "x"}, "batch", "takes no path"),
        ({"eventhubs.consumerGroup": " "}, "stream", "must not be empty"),
    ],
)
def test_bad_options(raw, mode, message):
    if "path" not in raw and "eventhubs.connectionString" not in raw and raw:
        raw = {"eventhubs.connectionString": CONN, **raw}
    with pytest.raises(OptionError, match=message):
        parse_options(raw, mode)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("60", 60), ("60s", 60), ("500ms", 0.5), ("15m", 900), ("1h", 3600), ("PT1M", 60), ("PT1H30M", 5400)],
)
def test_durations(text, seconds):
    assert parse_duration("o", text) == seconds


@pytest.mark.parametrize(
    "text",
    [
        "Endpoint=sb://ns/;SharedAccessKeyName=n;SharedAccessKey=TOPSECRET",  # no EntityPath
        "SharedAccessKeyName=n;SharedAccessKey=TOPSECRET;EntityPath=h",  # no Endpoint
        "Endpoint=sb://ns/;EntityPath=h;garbage TOPSECRET",
        "Endpoint=sb://ns/;EntityPath=h",  # no credentials
    ],
)
def test_bad_connection_strings_never_echo_the_secret(text):
    with pytest.raises(OptionError) as info:
        parse_connection_string(text)
    assert "TOPSECRET" not in str(info.value)
    assert "eventhubs.connectionString" in str(info.value)


def test_connection_settings_hide_the_secret_but_survive_pickling():
    settings = parse_connection_string(CONN)
    assert settings.namespace == "ns.servicebus.windows.net" and settings.hub == "hub"
    assert "TOPSECRET" not in repr(settings) and "TOPSECRET" not in str(settings)
    assert pickle.loads(pickle.dumps(settings)).connection_string.reveal() == CONN
    local = parse_connection_string("Endpoint=sb://127.0.0.1:5672;SharedAccessKeyName=a;SharedAccessKey=b;EntityPath=x")
    assert local.namespace == "127.0.0.1:5672"


def test_the_docs_generated_parts_are_in_step_with_their_sources():
    """The Options page's table (from the option specs) and the Performance page's figures (from
    bench/results.json) are what docs/generate.py makes of them now: no option or figure copied by hand."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "docs" / "generate.py"
    spec = importlib.util.spec_from_file_location("docs_generate", path)
    assert spec is not None and spec.loader is not None
    generate = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generate)
    drifted = [page for page, (old, new) in generate.pages_now().items() if old != new]
    assert not drifted, f"{drifted} drifted from their sources: run ./dev docs"
    options = (path.parent / "pages" / "options.md").read_text()
    assert options_table() in options and all(f"\n### `{spec.key}`\n" in options for spec in SPECS)
    assert len(SPECS) >= 15


# --- offsets and rate limits ---------------------------------------------------------------------


def test_offset_json_is_the_old_connector_shape():
    offset = SourceOffset("hub", {"10": 5, "2": 7})
    assert offset.to_json() == {"hub": {"2": 7, "10": 5}}
    assert SourceOffset.from_json('{"hub": {"0": 12, "1": 3}}', "hub").positions == {"0": 12, "1": 3}
    assert SourceOffset.from_json({"HUB": {"0": 1}}, "hub").positions == {"0": 1}
    with pytest.raises(OptionError, match="new checkpoint location"):
        SourceOffset.from_json({"other": {"0": 1}}, "hub")
    with pytest.raises(OptionError):
        SourceOffset.from_json("[", "hub")


def test_rate_limit_is_proportional_to_backlog_and_starves_nobody():
    start = {"0": 0, "1": 0, "2": 0, "3": 10}
    latest = {"0": 900, "1": 90, "2": 10, "3": 10}
    end = rate_limit(start, latest, 100)
    taken = {p: end[p] - start[p] for p in end}
    assert sum(taken.values()) == 100
    assert taken["0"] > taken["1"] > 0 and taken["2"] >= 1 and taken["3"] == 0
    assert rate_limit(start, latest, None) == latest
    assert rate_limit(start, latest, 10_000) == latest


@given(
    st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 5000)), min_size=1, max_size=40),
    st.integers(1, 20_000),
)
@example([(0, 1), (0, 1), (0, 4)], 3)  # the one-event minimum once overshot a budget it could meet
def test_rate_limit_properties(pairs, budget):
    start = {str(i): s for i, (s, _) in enumerate(pairs)}
    latest = {str(i): s + n for i, (s, n) in enumerate(pairs)}
    end = rate_limit(start, latest, budget)
    with_data = sum(1 for s, n in pairs if n)
    total = sum(end[p] - start[p] for p in end)
    for p in end:
        assert start[p] <= end[p] <= latest[p]
        if latest[p] > start[p]:
            assert end[p] > start[p]  # at least one event for every partition with data
    assert total <= max(budget, with_data)
    assert total == min(budget, sum(n for _, n in pairs)) or total == with_data


def test_split_ranges():
    pieces = split_ranges([Range("0", 0, 10), Range("1", 5, 6)], 4)
    assert [(r.partition, r.start, r.end) for r in pieces] == [("0", 0, 4), ("0", 4, 8), ("0", 8, 10), ("1", 5, 6)]
    assert split_ranges([Range("0", 0, 10)], None) == [Range("0", 0, 10)]


# --- receiver pool -----------------------------------------------------------------------------------


class FakeReceiver:
    def __init__(self, settings, config, partition):
        self.settings, self.config, self.partition = settings, config, partition
        self.position = None
        self.closed = False

    def close(self):
        self.closed = True


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_pool_reuses_expires_and_invalidates():
    clock = Clock()
    pool = ReceiverPool(capacity=2, idle_timeout=10, clock=clock, factory=FakeReceiver)
    settings = parse_connection_string(CONN)
    config = ReceiverConfig()
    first = pool.acquire(settings, config, "0", start=0)
    first.position = 100
    pool.release(first, healthy=True)
    again = pool.acquire(settings, config, "0", start=100)
    assert again is first and pool.stats.hits == 1
    pool.release(again, healthy=True)
    # a task retry never reuses
    retried = pool.acquire(settings, config, "0", start=100, retry=True)
    assert retried is not first and first.closed
    pool.release(retried, healthy=False)
    assert retried.closed and len(pool) == 0
    # an entry in use is never evicted, even over capacity
    a = pool.acquire(settings, config, "1", 0)
    b = pool.acquire(settings, config, "2", 0)
    c = pool.acquire(settings, config, "3", 0)
    assert not (a.closed or b.closed or c.closed)
    for r in (a, b, c):
        pool.release(r, healthy=True)
    assert len(pool) == 2
    clock.now = 100
    d = pool.acquire(settings, config, "4", 0)
    assert len(pool) == 1 and pool.stats.evictions >= 3
    pool.release(d, True)
    assert 0 < pool.stats.reuse_rate() < 1


def test_a_pool_serving_1024_partitions_attaches_each_once_over_many_micro_batches():
    """The default capacity holds every partition of the largest hub: no evict-and-reattach each micro-batch."""
    clock = Clock()
    pool = ReceiverPool(idle_timeout=60, clock=clock, factory=FakeReceiver)
    settings = parse_connection_string(CONN)
    config = ReceiverConfig()
    for batch in range(4):
        for p in range(1024):
            receiver = pool.acquire(settings, config, str(p), start=batch * 10)
            receiver.position = (batch + 1) * 10
            pool.release(receiver, healthy=True)
        clock.now += 5  # the next trigger, within the idle time-out
    assert pool.stats.creates == 1024 and pool.stats.evictions == 0 and pool.stats.hits == 3 * 1024


def test_links_share_the_process_read_ahead_budget_without_changing_a_few_links_bounds():
    from eventhubs_spark.amqp.frame_reader import LinkSink, ReadAheadBudget

    links = [4]
    budget = ReadAheadBudget(lambda: links[0], total=256 << 20, floor=256 << 10)
    sink = LinkSink(credit=500, max_events=2000, max_bytes=8 << 20, budget=budget)
    assert sink.bytes_bound() == 8 << 20  # 4 links: each keeps its own bound
    links[0] = 32
    assert sink.bytes_bound() == 8 << 20
    links[0] = 1024
    assert sink.bytes_bound() == 256 << 10  # 1,024 links: 256 MiB in all
    links[0] = 100_000
    assert sink.bytes_bound() == 256 << 10  # never below the floor
    sink.received, sink.received_bytes = 100, 100 * 10_000  # 10 KB events: the window follows the bound
    assert sink.window() == (256 << 10) // 10_000


def test_entra_settings_travel_as_plain_data_and_build_one_credential_per_process():
    """What goes to executors pickles without any azure-identity object; each process builds its own."""
    import pytest

    pytest.importorskip("azure.identity")
    settings = parse_options(
        {"eventhubs.namespace": "ns.servicebus.windows.net", "eventhubs.name": "hub",
         "eventhubs.entra.tenantId": "t", "eventhubs.entra.clientId": "c", "eventhubs.entra.clientSecret": "TOPSECRET"},
        "stream",
    ).settings  # fmt: skip
    data = pickle.dumps(settings)
    assert b"azure.identity" not in data and b"TOPSECRET" in data  # the secret travels, in a Secret
    assert "TOPSECRET" not in repr(settings)
    copy = pickle.loads(data)
    credential = copy.entra.credential()
    assert type(credential).__name__ == "ClientSecretCredential"
    assert copy.entra.credential() is credential  # one token cache per process
    assert settings.entra.credential() is credential  # equal settings, same credential
    assert copy.pool_key() == settings.pool_key()


def test_repositioning_a_receiver_hands_the_old_link_to_its_reader_thread_and_goes_on():
    """Closing a link is the connection's reader thread's work (a command), never the task's wait."""
    from types import SimpleNamespace

    from eventhubs_spark.executor.partition_receiver import PartitionReceiver

    settings = parse_connection_string(
        "Endpoint=sb://127.0.0.1:1;SharedAccessKeyName=a;SharedAccessKey=b;EntityPath=x;UseDevelopmentEmulator=true"
    )
    receiver = PartitionReceiver(settings, ReceiverConfig("$Default", 10, 5.0, True), "0", current().connections)
    handed: list[object] = []
    old_link = SimpleNamespace(sink=None)
    receiver._link, receiver._connection = old_link, SimpleNamespace(close_link=handed.append)  # type: ignore
    receiver._close_link()
    assert handed == [old_link] and receiver._link is None


def test_every_read_option_lands_in_the_typed_options_or_the_sign_in(monkeypatch):
    """Nothing is parsed and then left unused: setting any read option changes what the readers get (the
    typed options, or the connection settings where sign-in options go)."""
    from pathlib import Path

    from eventhubs_spark.options import READ

    # databricks.serviceCredential needs Databricks' entry point in the process: the tests' stand-in
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "databricks_standin"))

    store = {"eventhubs.checkpointStore.connectionString": "UseDevelopmentStorage=true",
             "eventhubs.checkpointStore.container": "c"}  # fmt: skip
    by_connection = {"eventhubs.connectionString": CONN, **store}
    by_namespace = {"eventhubs.namespace": "ns.servicebus.windows.net", "eventhubs.name": "hub", **store}
    proxy = {**by_connection, "eventhubs.httpProxy.hostname": "proxy", "eventhubs.httpProxy.port": "3128"}
    principal = {"eventhubs.entra.tenantId": "t", "eventhubs.entra.clientId": "c", "eventhubs.entra.clientSecret": "s"}
    avro = {**by_connection, "eventhubs.avro.schemaRegistry": "ns.servicebus.windows.net",
            "eventhubs.avro.schema": '"long"'}  # fmt: skip
    # option -> (options it is set beside, the value it gets)
    cases = {
        "eventhubs.connectionString": ({"eventhubs.namespace": None, "eventhubs.name": None, **store}, CONN),
        "eventhubs.namespace": (by_namespace, "other.servicebus.windows.net"),
        "eventhubs.name": (by_namespace, "other"),
        "eventhubs.auth": (by_namespace, "managedIdentity"),
        "eventhubs.sasToken": (by_namespace, "SharedAccessSignature sr=ns&sig=s&se=4102444800&skn=k"),
        "eventhubs.entra.tenantId": ({**by_namespace, "eventhubs.auth": "workloadIdentity"}, "tenant"),
        "eventhubs.entra.clientId": (by_namespace, "client"),
        "eventhubs.entra.clientSecret": ({**by_namespace, **principal}, "other-secret"),
        "eventhubs.entra.certificatePath": ({**by_namespace, **principal, "eventhubs.entra.clientSecret": None},
                                            "/c.pem"),
        "eventhubs.entra.certificate": ({**by_namespace, **principal, "eventhubs.entra.clientSecret": None},
                                        "-----BEGIN PRIVATE KEY-----"),
        "eventhubs.entra.certificatePassword": ({**by_namespace, **principal, "eventhubs.entra.clientSecret": None,
                                                 "eventhubs.entra.certificatePath": "/c.pem"}, "pw"),
        "eventhubs.entra.federatedTokenFile": (by_namespace, "/token"),
        "eventhubs.entra.authorityHost": (by_namespace, "https://login.microsoftonline.us"),
        "eventhubs.entra.disableInstanceDiscovery": (by_namespace, "true"),
        "eventhubs.useDevelopmentEmulator": (by_namespace, "true"),
        "eventhubs.checkpointStore.connectionString": (by_connection, "UseDevelopmentStorage=false"),
        "eventhubs.checkpointStore.accountUrl": ({**by_connection,
                                                  "eventhubs.checkpointStore.connectionString": None}, "https://a"),
        "eventhubs.checkpointStore.sasToken": ({**by_connection, "eventhubs.checkpointStore.connectionString": None,
                                                "eventhubs.checkpointStore.accountUrl": "https://a"}, "sv=1&sig=s"),
        "eventhubs.checkpointStore.container": (by_connection, "other"),
        "eventhubs.useExclusiveReceiver": (by_connection, "false"),
        "maxEventsPerPartition": ({**by_connection, "eventhubs.useExclusiveReceiver": "false"}, "50000"),
        "failOnDataLoss": (by_connection, "false"),
        "eventhubs.startFromCheckpointStore": (by_connection, "true"),
        "eventhubs.ownership": (by_connection, "true"),
        "eventhubs.loadBalancing.strategy": ({**by_connection, "eventhubs.ownership": "true"}, "balanced"),
        # options whose example is their default
        "eventhubs.consumerGroup": (by_connection, "other"),
        "maxTriggerDelay": (by_connection, "5m"),
        "eventhubs.prefetchCount": (by_connection, "100"),
        "eventhubs.receiverTimeout": (by_connection, "30s"),
        "eventhubs.operationTimeout": (by_connection, "30s"),
        "eventhubs.connectionIdleTimeout": (by_connection, "10s"),
        "eventhubs.partitionDiscoveryInterval": (by_connection, "30s"),
        "eventhubs.loadBalancing.updateInterval": ({**by_connection, "eventhubs.ownership": "true"}, "5s"),
        "eventhubs.loadBalancing.ownershipExpiration": ({**by_connection, "eventhubs.ownership": "true"}, "90s"),
        "eventhubs.receiverService": (by_connection, {"stream": "false", "batch": "true"}),  # against the default
        "eventhubs.minEventsPerTask": (by_connection, "500"),
        "eventhubs.readAhead.maxEvents": (by_connection, "100"),
        "eventhubs.readAhead.maxBytes": (by_connection, "1MB"),
        "eventhubs.httpProxy.hostname": (proxy, "other-proxy"),
        "eventhubs.httpProxy.port": (proxy, "8080"),
        "eventhubs.httpProxy.username": ({**proxy, "eventhubs.httpProxy.password": "pw"}, "user"),
        "eventhubs.httpProxy.password": ({**proxy, "eventhubs.httpProxy.username": "user"}, "pw"),
        "eventhubs.connectionVerify": (by_connection, __file__),  # a file that exists
        "eventhubs.avro.schemaRegistry": ({**by_connection, "eventhubs.avro.schema": '"long"'},
                                          "ns.servicebus.windows.net"),
        "eventhubs.avro.schema": ({**by_connection, "eventhubs.avro.schemaRegistry": "ns.servicebus.windows.net"},
                                  '"string"'),
        "eventhubs.avro.schemaId": ({**by_connection, "eventhubs.avro.schemaRegistry": "ns.servicebus.windows.net"},
                                    "0f5e"),
        "eventhubs.avro.mode": (avro, "PERMISSIVE"),
        "eventhubs.avro.corruptRecordColumn": ({**avro, "eventhubs.avro.mode": "PERMISSIVE"}, "_bad"),
        "eventhubs.capture.location": (by_connection, "/capture"),
        "eventhubs.capture.nameFormat": ({**by_connection, "eventhubs.capture.location": "/capture"},
                                         "{EventHub}/{Namespace}/{PartitionId}/{Year}{Month}{Day}{Hour}{Minute}{Second}"),
        "eventhubs.capture.namespace": ({**by_connection, "eventhubs.capture.location": "/capture"}, "other"),
        "eventhubs.capture.connectionString": ({**by_connection, "eventhubs.capture.location": "/capture"},
                                               "UseDevelopmentStorage=true"),
        "eventhubs.capture.sasToken": ({**by_connection, "eventhubs.capture.location": "/capture"}, "sv=1&sig=s"),
        "eventhubs.capture.lateFileWait": ({**by_connection, "eventhubs.capture.location": "/capture"}, "2m"),
        "databricks.serviceCredential": ({**by_namespace, "eventhubs.name": "hub"}, "eventhubs-reader"),
        "databricks.serviceCredential.scope": ({**by_namespace, "databricks.serviceCredential": "c"}, "api://x"),
    }  # fmt: skip
    ownership = {"eventhubs.ownerId", "eventhubs.loadBalancing.maxPartitions"}
    for spec in SPECS:
        beside, value = cases.get(spec.key, (by_connection, spec.example))
        if spec.key in ownership:
            beside = {**by_connection, "eventhubs.ownership": "true"}
        for mode in sorted(spec.modes & READ):
            set_to = value[mode] if isinstance(value, dict) else value
            after = {**{k: v for k, v in beside.items() if v is not None}, spec.key: set_to}
            before = {k: v for k, v in beside.items() if v is not None}
            try:
                parse_options(before, mode)
            except OptionError:  # the option is needed beside the others: compare with a plain read
                before = by_namespace if spec.key == "eventhubs.connectionString" else by_connection
            assert parse_options(before, mode) != parse_options(after, mode), f"{spec.key} ({mode}) changes nothing"


def test_every_reader_and_writer_pickles_after_the_process_runtime_is_in_use():
    """Spark pickles readers and writers to executors (and Connect between processes); none may hold the runtime."""
    from pyspark import cloudpickle
    from pyspark.sql.types import StringType, StructField, StructType

    from eventhubs_spark.source import EventHubsDataSource

    assert current().producers is not None  # the runtime exists, with its locks, before the readers are made
    source = EventHubsDataSource({"eventhubs.connectionString": CONN})
    body = StructType([StructField("body", StringType())])
    made = {
        "batch reader": source.reader(source.schema()),
        "stream reader": source.streamReader(source.schema()),
        "batch writer": source.writer(body, False),
        "stream writer": source.streamWriter(body, False),
    }
    for name, obj in made.items():
        copy = pickle.loads(cloudpickle.dumps(obj))
        assert type(copy) is type(obj), name
    reader = made["stream reader"]
    assert pickle.loads(cloudpickle.dumps(reader)).planner.settings.pool_key() == reader.planner.settings.pool_key()


# --- a worker's garbage collections -----------------------------------------------------------------


@pytest.fixture
def in_spark_task():
    """What a Spark Python worker has while it runs a task: a TaskContext."""
    from pyspark import TaskContext

    TaskContext._setTaskContext(None)
    context = TaskContext(attemptNumber=0, partitionId=0, stageId=0, taskAttemptId=0)
    yield context
    TaskContext._setTaskContext(None)


def test_a_workers_second_task_freezes_what_the_worker_holds_out_of_the_collections(monkeypatch, in_spark_task):
    import gc

    from eventhubs_spark.process import runtime
    from eventhubs_spark.source import EventHubsPartition, read_partition

    monkeypatch.setattr(runtime, "_tasks_started", 0)
    monkeypatch.delenv(runtime.GC_FREEZE_ENV, raising=False)
    gc.unfreeze()
    try:
        list(read_partition(EventHubsPartition(())))
        assert gc.get_freeze_count() == 0  # the first task may still import: nothing yet
        list(read_partition(EventHubsPartition(())))
        frozen = gc.get_freeze_count()
        assert frozen > 10_000  # pytest, pyspark, pyarrow and the connector's modules: all the process holds
        gc.collect()
        assert gc.get_count()[0] < 1_000  # what the collector still walks is what was made since
        list(read_partition(EventHubsPartition(())))
        assert gc.get_freeze_count() <= frozen  # once per worker: later tasks freeze nothing more
    finally:
        gc.unfreeze()


def test_nothing_is_frozen_outside_a_spark_task_or_when_the_environment_says_so(monkeypatch):
    import gc

    from pyspark import TaskContext

    from eventhubs_spark.process import runtime

    frozen: list[bool] = []
    monkeypatch.setattr(gc, "freeze", lambda: frozen.append(True))
    monkeypatch.setattr(runtime, "_tasks_started", 0)
    TaskContext._setTaskContext(None)
    for _ in range(3):
        runtime.task_started()  # a direct call, as in these tests, not a Spark task
    assert frozen == [] and runtime._tasks_started == 0
    TaskContext(attemptNumber=0, partitionId=0, stageId=0, taskAttemptId=0)
    try:
        for value in ("false", "0", " Off "):
            monkeypatch.setenv(runtime.GC_FREEZE_ENV, value)
            monkeypatch.setattr(runtime, "_tasks_started", 0)
            for _ in range(3):
                runtime.task_started()
            assert frozen == [], value
        monkeypatch.setenv(runtime.GC_FREEZE_ENV, "true")
        monkeypatch.setattr(runtime, "_tasks_started", 0)
        for _ in range(3):
            runtime.task_started()
        assert frozen == [True]
    finally:
        TaskContext._setTaskContext(None)


def test_a_misspelt_gc_freeze_setting_fails_each_task_naming_the_variable(monkeypatch):
    from pyspark import TaskContext

    from eventhubs_spark.errors import OptionError
    from eventhubs_spark.process import runtime

    monkeypatch.setattr(runtime, "_tasks_started", 0)
    monkeypatch.setenv(runtime.GC_FREEZE_ENV, "flase")
    TaskContext(attemptNumber=0, partitionId=0, stageId=0, taskAttemptId=0)
    try:
        for _ in range(2):  # not only the task that would freeze: every one
            with pytest.raises(OptionError) as caught:
                runtime.task_started()
            message = str(caught.value)
            assert "EVENTHUBS_SPARK_GC_FREEZE" in message and "'flase'" in message
            assert "spark.executorEnv.EVENTHUBS_SPARK_GC_FREEZE=false" in message
        for value, wanted in (("yes", True), (" ON ", True), ("1", True), ("no", False), ("0", False)):
            monkeypatch.setenv(runtime.GC_FREEZE_ENV, value)
            assert runtime.gc_freeze_wanted() is wanted, value
        monkeypatch.delenv(runtime.GC_FREEZE_ENV)
        assert runtime.gc_freeze_wanted() is True
    finally:
        TaskContext._setTaskContext(None)


def test_a_sink_task_counts_as_a_task_of_the_worker(monkeypatch, in_spark_task):
    from eventhubs_spark import sink
    from eventhubs_spark.process import runtime

    started: list[bool] = []
    monkeypatch.setattr(runtime, "task_started", lambda: started.append(True))

    class Sender:
        report = sink.SendReport()

        def __init__(self, *args: object) -> None:
            pass

        def flush(self) -> None:
            pass

    monkeypatch.setattr(sink, "EventSender", Sender)
    assert sink._write(None, None, 1.0, iter(()), arrow=True) is Sender.report  # type: ignore[arg-type]
    assert started == [True]


def test_a_writes_commit_sums_its_tasks_reports_into_one_summary_and_its_warnings(caplog) -> None:
    import logging
    import types

    from eventhubs_spark import sink

    writer = sink.EventHubsStreamRowWriter.__new__(sink.EventHubsStreamRowWriter)
    writer.settings = types.SimpleNamespace(hub="orders")  # type: ignore[assignment]
    reports = [
        sink.SendReport(by_partition={"0": 5, "10": 2}, by_key=1, batches=2, throttled=1, throttled_wait=0.5),
        None,  # a task that sent nothing reports nothing
        sink.SendReport(by_partition={"0": 3, "2": 4}, batches=1, throttled=2, throttled_wait=1.25, resent=3),
    ]
    with caplog.at_level(logging.INFO, logger=sink._LOG.name):
        writer.commit(reports, 7)
    said = [r.getMessage() for r in caplog.records]
    assert [m for m in said if "sent again" in m] == [
        "eventhubs sink hub=orders batch=7: 3 events were sent again after a send of theirs went unanswered (for "
        "eventhubs.connectionIdleTimeout, or until eventhubs.operationTimeout); the first send may have been stored "
        "all the same, so the hub may hold them twice (delivery is at least once)"
    ]
    (throttling,) = [m for m in said if "throttling" in m]
    assert "refused 3 sends as busy, and the tasks waited 1.8 s in all" in throttling
    assert (
        "eventhubs sink hub=orders batch=7 sent 15 events (per partition: 0:8, 2:4, 10:2; routed by partition key: 1)"
        in said
    )
    caplog.clear()
    with caplog.at_level(logging.INFO, logger=sink._LOG.name):
        writer.abort(reports, 8)
    assert [r.getMessage() for r in caplog.records] == [
        "eventhubs sink hub=orders batch=8 aborted after 15 events were sent; Spark re-runs it (at least once)"
    ]


def test_the_demo_leaves_out_only_sparks_closed_socket_tracebacks_the_daemons_at_any_time() -> None:
    import threading

    from eventhubs_spark.cli.demo import ShutdownNoise

    spark_noise = (
        "Traceback (most recent call last):\n"
        '  File "pyspark/daemon.py", line 264, in manager\n'
        "EOFError\n"
        "\n"
        "During handling of the above exception, another exception occurred:\n"
        "\n"
        "Traceback (most recent call last):\n"
        '  File "pyspark/daemon.py", line 95, in worker\n'
        "BrokenPipeError: [Errno 32] Broken pipe\n"
    )
    real = 'Traceback (most recent call last):\n  File "x.py", line 1, in f\nValueError: a real failure\n'
    stopping = threading.Event()

    def through(text: str) -> str:
        noise = ShutdownNoise(stopping)
        out = b"".join(noise.feed(line.encode()) for line in text.splitlines(keepends=True))
        return (out + noise.flush()).decode()

    worker_noise = 'Traceback (most recent call last):\n  File "pyspark/worker.py", line 9, in main\nEOFError\n'
    running = "a line\n" + spark_noise + worker_noise + real + "the end\n"
    # while the demo runs: the daemon's closed sockets are left out (a healthy run printed three), the rest passed on
    assert through(running) == "a line\n" + worker_noise + real + "the end\n"
    stopping.set()
    assert through(running) == "a line\n" + real + "the end\n"
    cut_short = 'Traceback (most recent call last):\n  File "pyspark/daemon.py", line 1\n'
    assert through(cut_short) == cut_short, "a traceback the stream ends in is passed on"


def test_the_sdks_slow_decoder_is_said_once_per_partition_with_its_count(caplog):
    from eventhubs_spark import source
    from eventhubs_spark.auth.settings import parse_connection_string
    from eventhubs_spark.interprocess.task_ranges import RangeRequest

    settings = parse_connection_string(CONN)
    first = RangeRequest(ReceiverConfig(consumer_group="slow-path"), "7", 100, 200, True, settings=settings)
    with caplog.at_level("WARNING", logger="eventhubs_spark"):
        assert source.slow_path_taken(first, 12, 100)
        assert not source.slow_path_taken(RangeRequest(first.config, "7", 200, 300, True, settings=settings), 5, 100)
        assert source.slow_path_taken(RangeRequest(first.config, "8", 0, 10, True, settings=settings), 1, 10)
    said = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(said) == 2 and "partition 7" in said[0] and "12 of 100 events in [100, 200)" in said[0], said
    assert "partition 8" in said[1] and "TOPSECRET" not in " ".join(said)
