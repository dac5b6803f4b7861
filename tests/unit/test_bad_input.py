"""Bad input: every bad option value or position is answered with its option's name and a valid example.

Each case injects one bad value through ``parse_options`` (what Spark hands the source) and checks
the message names the option and shows what a valid value looks like. The property tests feed the
parsers arbitrary text and JSON: they either accept it or raise ``OptionError``, never anything else.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from eventhubs_spark.errors import OptionError
from eventhubs_spark.options import SPECS, parse_duration, parse_options
from eventhubs_spark.positions.event_positions import parse_position, parse_positions

CONN = "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=n;SharedAccessKey=TOPSECRET;EntityPath=hub"
STORE = {
    "eventhubs.checkpointStore.connectionString": "UseDevelopmentStorage=true",
    "eventhubs.checkpointStore.container": "c",
}

# (option named in the message, raw options, mode)
CASES = [
    ("eventhubs.connectionString", {}, "stream"),
    ("eventhubs.connectionString", {"eventhubs.connectionString": " "}, "stream"),
    ("eventhubs.conectionString", {"eventhubs.conectionString": CONN}, "stream"),
    ("eventhubs.consumerGroup", {"eventhubs.consumerGroup": ""}, "stream"),
    ("maxEventsPerTrigger", {"maxEventsPerTrigger": "lots"}, "stream"),
    ("maxEventsPerTrigger", {"maxEventsPerTrigger": "0"}, "stream"),
    ("maxEventsPerTrigger", {"maxEventsPerTrigger": "1.5"}, "stream"),
    ("maxEventsPerTrigger", {"maxEventsPerTrigger": "10"}, "batch"),
    ("minEventsPerTrigger", {"minEventsPerTrigger": "-3"}, "stream"),
    ("minEventsPerTrigger", {"minEventsPerTrigger": "100", "maxEventsPerTrigger": "10"}, "stream"),
    ("maxTriggerDelay", {"maxTriggerDelay": "5 fortnights"}, "stream"),
    ("maxTriggerDelay", {"maxTriggerDelay": "-1s"}, "stream"),
    ("failOnDataLoss", {"failOnDataLoss": "maybe"}, "stream"),
    ("failOnDataLoss", {"failOnDataLoss": "1"}, "batch"),
    ("maxEventsPerPartition", {"maxEventsPerPartition": "none"}, "batch"),
    ("eventhubs.prefetchCount", {"eventhubs.prefetchCount": "-1"}, "stream"),
    ("eventhubs.receiverTimeout", {"eventhubs.receiverTimeout": "soon"}, "stream"),
    ("eventhubs.operationTimeout", {"eventhubs.operationTimeout": "PT"}, "write"),
    ("eventhubs.useExclusiveReceiver", {"eventhubs.useExclusiveReceiver": "yes"}, "stream"),
    ("eventhubs.useExclusiveReceiver", {"maxEventsPerPartition": "100"}, "stream"),
    ("eventhubs.partitionDiscoveryInterval", {"eventhubs.partitionDiscoveryInterval": "often"}, "stream"),
    ("eventhubs.endingPosition", {"eventhubs.endingPosition": '{"offset": "@latest"}'}, "stream"),
    ("eventhubs.startingPosition", {"eventhubs.startingPosition": "{"}, "stream"),
    ("eventhubs.startingPosition", {"eventhubs.startingPosition": "[1]"}, "stream"),
    ("eventhubs.startingPosition", {"eventhubs.startingPosition": "{}"}, "stream"),
    ("eventhubs.startingPosition", {"eventhubs.startingPosition": '{"offset": "-1", "seqNo": 4}'}, "stream"),
    ("eventhubs.startingPosition", {"eventhubs.startingPosition": '{"seqNo": -5}'}, "batch"),
    ("eventhubs.startingPosition", {"eventhubs.startingPosition": '{"seqNo": "ten"}'}, "stream"),
    ("eventhubs.startingPosition", {"eventhubs.startingPosition": '{"offset": "abc"}'}, "stream"),
    ("eventhubs.startingPosition", {"eventhubs.startingPosition": '{"enqueuedTime": "yesterday"}'}, "stream"),
    ("eventhubs.startingPosition", {"eventhubs.startingPosition": '{"seqNo": 1, "isInclusive": "yes"}'}, "stream"),
    ("eventhubs.startingPosition", {"eventhubs.startingPosition": '{"sequence": 1}'}, "stream"),
    ("eventhubs.startingPositions", {"eventhubs.startingPositions": '{"zero": {"seqNo": 1}}'}, "stream"),
    ("eventhubs.startingPositions", {"eventhubs.startingPositions": '[{"seqNo": 1}]'}, "stream"),
    ("eventhubs.startingPositions", {"eventhubs.startingPositions": '{"0": {"seqNo": true}}'}, "stream"),
    ("eventhubs.endingPositions", {"eventhubs.endingPositions": '{"1": "end"}'}, "batch"),
    ("eventhubs.endingPosition", {"eventhubs.endingPosition": '{"enqueuedTime": [2024]}'}, "batch"),
    ("eventhubs.maxSilentTime", {"eventhubs.maxSilentTime": "PT60S"}, "stream"),
    ("eventhubs.checkpointStore.container", {"eventhubs.checkpointStore.connectionString": "x"}, "stream"),
    ("eventhubs.checkpointStore.connectionString", {"eventhubs.checkpointStore.container": "c"}, "batch"),
    ("eventhubs.startFromCheckpointStore", {"eventhubs.startFromCheckpointStore": "true"}, "stream"),
    ("eventhubs.checkpointStore.accountUrl", {**STORE, "eventhubs.checkpointStore.accountUrl": "https://a"}, "stream"),
    ("eventhubs.checkpointStore.sasToken", {**STORE, "eventhubs.checkpointStore.sasToken": "sv=1&sig=x"}, "batch"),
    ("eventhubs.ownership", {"eventhubs.ownership": "true"}, "stream"),
    ("eventhubs.ownership", {"eventhubs.ownership": "true", **STORE}, "batch"),
    ("eventhubs.loadBalancing.strategy", {"eventhubs.loadBalancing.strategy": "fair", **STORE}, "stream"),
    (
        "eventhubs.loadBalancing.ownershipExpiration",
        {"eventhubs.loadBalancing.ownershipExpiration": "10s", "eventhubs.loadBalancing.updateInterval": "10s"},
        "stream",
    ),
    ("eventhubs.loadBalancing.maxPartitions", {"eventhubs.loadBalancing.maxPartitions": "0"}, "stream"),
    ("path", {"path": "/tmp/x"}, "batch"),
]


@pytest.mark.parametrize(("option", "raw", "mode"), CASES, ids=[f"{i}-{c[0]}" for i, c in enumerate(CASES)])
def test_bad_option_values_name_the_option_and_show_an_example(option, raw, mode):
    if "eventhubs.connectionString" not in raw and option not in ("eventhubs.connectionString", "path"):
        raw = {"eventhubs.connectionString": CONN, **raw}
    with pytest.raises(OptionError) as info:
        parse_options(raw, mode)
    message = str(info.value)
    assert option.lower() in message.lower(), message
    assert info.value.example and info.value.example in message, f"no example in: {message}"
    assert "TOPSECRET" not in message


def test_there_are_at_least_thirty_cases():
    assert len(CASES) >= 30


_TEXT = st.one_of(
    st.text(max_size=40),
    st.from_regex(r"-?[0-9]{1,6}(\.[0-9])?\s?(ms|s|m|h|min|x)?", fullmatch=True),
    st.sampled_from(["true", "false", "TRUE", " 10s ", "PT1M", "@latest", "-1", "", "{}", "null"]),
)
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=12), inner, max_size=3),
    max_leaves=8,
)
_POSITION_KEYS = st.sampled_from(["offset", "seqNo", "enqueuedTime", "isInclusive", "Offset", "SEQNO", "other"])
_POSITION = st.dictionaries(_POSITION_KEYS, _JSON, max_size=3)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([s.key for s in SPECS if s.key != "eventhubs.connectionString"]), _TEXT,
       st.sampled_from(["stream", "batch", "write"]))  # fmt: skip
@example("eventhubs.namespace", "[", "stream")  # urlparse raised ValueError ("Invalid IPv6 URL")
@example("eventhubs.namespace", "ns:99999", "stream")  # a port out of range
@example("eventhubs.startingPosition", '{"offset": "\u00b2"}', "stream")  # "²".isdigit() is True
def test_any_option_value_is_accepted_or_refused_clearly(key, value, mode):
    try:
        parse_options({"eventhubs.connectionString": CONN, key: value}, mode)
    except OptionError as exc:
        assert str(exc), "an empty message"
        assert "TOPSECRET" not in str(exc)


@settings(max_examples=300, deadline=None)
@given(st.one_of(_POSITION.map(json.dumps), _JSON.map(json.dumps), st.text(max_size=30)))
def test_any_position_is_accepted_or_refused_naming_the_option(text):
    try:
        parse_position(text, "eventhubs.startingPosition")
    except OptionError as exc:
        assert "eventhubs.startingPosition" in str(exc)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.one_of(st.from_regex(r"[0-9]{1,3}", fullmatch=True), st.text(max_size=8)), _POSITION,
                       max_size=3).map(json.dumps))  # fmt: skip
@example('{"\u00b2": {"seqNo": 1}}')  # "²".isdigit() is True, int("²") fails
def test_any_per_partition_positions_are_accepted_or_refused_naming_the_option(text):
    try:
        parse_positions(text, "eventhubs.startingPositions")
    except OptionError as exc:
        assert "eventhubs.startingPositions" in str(exc)


# --- signing in: each bad combination names the options involved ----------------------------------
NS = {"eventhubs.namespace": "ns.servicebus.windows.net", "eventhubs.name": "hub"}
SP = {"eventhubs.entra.tenantId": "t", "eventhubs.entra.clientId": "c"}
LIVE_SAS = "SharedAccessSignature sr=ns.servicebus.windows.net%2Fhub&sig=TOPSECRET&se=4102444800&skn=listen"
AUTH_CASES = [
    ("eventhubs.namespace", {**NS, "eventhubs.connectionString": CONN}),
    ("eventhubs.name", {"eventhubs.namespace": "ns.servicebus.windows.net"}),
    ("eventhubs.namespace", {"eventhubs.namespace": "sb://ns.servicebus.windows.net/hub/extra", "eventhubs.name": "h"}),
    ("eventhubs.name", {"eventhubs.connectionString": CONN, "eventhubs.name": "other"}),
    ("eventhubs.auth", {**NS, "eventhubs.auth": "password"}),
    ("eventhubs.auth", {**NS, "eventhubs.auth": "connectionString"}),
    ("eventhubs.auth", {"eventhubs.connectionString": CONN, "eventhubs.auth": "managedIdentity"}),
    ("eventhubs.sasToken", {**NS, "eventhubs.auth": "sasToken"}),
    ("eventhubs.sasToken", {"eventhubs.connectionString": CONN, "eventhubs.sasToken": LIVE_SAS}),
    ("eventhubs.sasToken", {**NS, "eventhubs.sasToken": "sr=x&sig=TOPSECRET&se=1000&skn=k"}),  # expired
    ("eventhubs.sasToken", {**NS, "eventhubs.sasToken": "sig=TOPSECRET"}),
    ("eventhubs.sasToken", {**NS, "eventhubs.sasToken": "sr=x&sig=TOPSECRET&se=soon"}),
    ("eventhubs.entra.tenantId", {**NS, "eventhubs.auth": "servicePrincipal",
                                  "eventhubs.entra.clientSecret": "TOPSECRET"}),
    ("eventhubs.entra.clientSecret", {**NS, **SP, "eventhubs.auth": "servicePrincipal"}),
    ("eventhubs.entra.certificatePath", {**NS, **SP, "eventhubs.entra.clientSecret": "TOPSECRET",
                                         "eventhubs.entra.certificatePath": "/x.pem"}),
    ("eventhubs.entra.clientSecret", {**NS, **SP, "eventhubs.auth": "managedIdentity",
                                      "eventhubs.entra.clientSecret": "TOPSECRET"}),
    ("eventhubs.entra.tenantId", {**NS, **SP, "eventhubs.auth": "managedIdentity"}),
    ("eventhubs.entra.certificatePassword", {**NS, **SP, "eventhubs.entra.clientSecret": "TOPSECRET",
                                             "eventhubs.entra.certificatePassword": "TOPSECRET"}),
    ("eventhubs.entra.federatedTokenFile", {**NS, **SP, "eventhubs.auth": "managedIdentity",
                                            "eventhubs.entra.federatedTokenFile": "/t"}),
    ("eventhubs.entra.clientSecret", {"eventhubs.connectionString": CONN, **SP, "eventhubs.entra.clientSecret": "x"}),
    ("eventhubs.entra.authorityHost", {**NS, "eventhubs.entra.authorityHost": "http://login.local"}),
]  # fmt: skip


@pytest.mark.parametrize(("option", "raw"), AUTH_CASES, ids=[f"{i}-{c[0]}" for i, c in enumerate(AUTH_CASES)])
def test_bad_sign_in_options_name_the_option_and_show_an_example(option, raw):
    with pytest.raises(OptionError) as info:
        parse_options(raw, "stream")
    message = str(info.value)
    assert option.lower() in message.lower(), message
    assert info.value.example and info.value.example in message, f"no example in: {message}"
    assert "TOPSECRET" not in message


def test_sign_in_methods_are_implied_by_the_options_given():
    from eventhubs_spark.auth.secret import Secret

    def method(raw):
        return parse_options(raw, "batch").settings.auth_method

    assert method({"eventhubs.connectionString": CONN}) == "connectionString"
    assert method({**NS, "eventhubs.sasToken": LIVE_SAS}) == "sasToken"
    assert method({**NS, **SP, "eventhubs.entra.clientSecret": "s"}) == "servicePrincipal"
    assert method({**NS, **SP, "eventhubs.entra.certificatePath": "/c.pem"}) == "servicePrincipal"
    assert method({**NS, "eventhubs.entra.federatedTokenFile": "/t"}) == "workloadIdentity"
    assert method({**NS}) == "defaultAzureCredential"
    assert method({**NS, "eventhubs.auth": "MANAGEDIDENTITY"}) == "managedIdentity"
    sas = LIVE_SAS.removeprefix("SharedAccessSignature ")
    settings = parse_options({**NS, "eventhubs.sasToken": sas}, "batch").settings
    assert settings.sas_token == Secret(LIVE_SAS)  # the prefix is added when left out
    # The checkpoint store by account URL without a SAS token signs in with the Entra identity too.
    settings = parse_options({"eventhubs.connectionString": CONN, **SP, "eventhubs.entra.clientSecret": "s",
                                 "eventhubs.checkpointStore.accountUrl": "https://a.blob.core.windows.net",
                                 "eventhubs.checkpointStore.container": "c"}, "stream").settings  # fmt: skip
    assert settings.auth_method == "connectionString" and settings.entra.method == "servicePrincipal"


@pytest.mark.parametrize(
    "name",
    [
        "connector.example.json",
        "connector.entra.example.json",
        "connector.proxy.example.json",
        "connector.avro.example.json",
        "connector.databricks.example.json",
        "connector.capture.example.json",
    ],
)
def test_the_example_configurations_in_conf_are_valid(name, monkeypatch):
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    assert sorted(p.name for p in (root / "conf").glob("connector*.json")) == sorted(
        test_the_example_configurations_in_conf_are_valid.pytestmark[0].args[1]  # type: ignore[attr-defined]
    ), "every example in conf/ is checked here"
    if "databricks" in name:  # Databricks' entry point, as the tests stand it in (tests/databricks_standin)
        monkeypatch.syspath_prepend(str(root / "tests" / "databricks_standin"))
        monkeypatch.delitem(sys.modules, "databricks", raising=False)
    raw = json.loads((root / "conf" / name).read_text())
    raw.pop("_comment")
    try:
        options = parse_options(raw, "stream")
    finally:  # the stand-in leaves no trace for the tests after (which check the error off Databricks)
        for module in [m for m in sys.modules if m == "databricks" or m.startswith("databricks.")]:
            del sys.modules[module]
    assert options.settings.hub and options.consumer_group == "spark-orders"
    if "databricks" in name:
        assert options.settings.entra.method == "serviceCredential"
    if "capture" in name:
        assert options.capture is not None and options.capture.late_file_wait == 300.0
        assert options.capture.namespace == "namespace" and options.capture.connection_string is not None


def test_the_recommended_spark_settings_in_conf_are_the_ones_the_tests_and_demo_run_with():
    from pathlib import Path

    from eventhubs_spark.local_spark import spark_defaults

    recommended = spark_defaults(Path(__file__).resolve().parents[2] / "conf" / "spark-defaults.example.conf")
    assert recommended == {"spark.python.unix.domain.socket.enabled": "true"}
    assert recommended.items() <= spark_defaults().items()


@pytest.mark.parametrize(
    ("option", "raw"),
    [
        ("eventhubs.startingPosition", {"eventhubs.startingPosition": '{"offset": "\u00b2"}'}),
        ("eventhubs.startingPositions", {"eventhubs.startingPositions": '{"\u00b2": {"seqNo": 1}}'}),
        ("eventhubs.namespace", {"eventhubs.namespace": "[", "eventhubs.name": "h"}),
        ("eventhubs.connectionString", {"eventhubs.connectionString": CONN.replace(".net/", ".net:99999/")}),
    ],
)
def test_digits_that_are_not_ascii_and_malformed_addresses_are_refused(option, raw):
    """Found by the property tests: "²".isdigit() is true but int() refuses it; urlparse raises on "[" and
    on a port out of range. Each is an OptionError naming the option, never a ValueError from inside."""
    if option != "eventhubs.connectionString" and "eventhubs.namespace" not in raw:
        raw = {"eventhubs.connectionString": CONN, **raw}
    with pytest.raises(OptionError) as info:
        parse_options(raw, "stream")
    assert option.lower() in str(info.value).lower()
    assert "TOPSECRET" not in str(info.value)


# -- a query's own schema (``.schema(...)``): some of the source's columns, else an error naming the column --


def _struct(*fields: tuple[str, object, bool]) -> object:
    from pyspark.sql.types import StructField, StructType

    return StructType([StructField(name, kind, nullable) for name, kind, nullable in fields])  # type: ignore[arg-type]


def test_a_query_schema_picks_columns_in_its_own_order_and_spelling() -> None:
    import pyarrow as pa
    from pyspark.sql.pandas.types import from_arrow_schema
    from pyspark.sql.types import BinaryType, LongType, MapType, StringType

    from eventhubs_spark.codec.schema import ARROW_SCHEMA, projection

    assert projection(None) is None
    assert projection(from_arrow_schema(ARROW_SCHEMA)) is None  # the source's own: nothing to pick
    picked = projection(
        _struct(("SequenceNumber", LongType(), True), ("body", BinaryType(), True),
                ("properties", MapType(StringType(), StringType(), True), True))
    )  # fmt: skip
    assert picked is not None and picked.indexes == (3, 0, 7)
    full = pa.RecordBatch.from_pylist(
        [{"body": b"b", "partition": "0", "offset": "1", "sequenceNumber": 5, "enqueuedTime": None,
          "publisher": None, "partitionKey": None, "properties": [("k", "v")], "systemProperties": []}],
        schema=ARROW_SCHEMA,
    )  # fmt: skip
    out = picked.apply(full)
    assert out.schema.names == ["SequenceNumber", "body", "properties"]
    assert out.to_pylist() == [{"SequenceNumber": 5, "body": b"b", "properties": [("k", "v")]}]


@pytest.mark.parametrize(
    ("fields", "named", "says"),
    [
        ((("bodie", "binary", True),), "'bodie'", "is not a column"),
        ((("body", "string", True),), "'body'", "declare it binary"),
        # the conversion the hint shows goes to the type the query declared
        (
            (("offset", "bigint", True),),
            "'offset'",
            "declare it string and convert it after load() (e.g. col('offset').cast(\"bigint\"))",
        ),
        ((("body", "bigint", True),), "'body'", 'col(\'body\').cast("string").cast("bigint")'),
        ((("sequenceNumber", "string", True),), "'sequenceNumber'", "col('sequenceNumber').cast(\"string\")"),
        ((("enqueuedTime", "timestamp_ntz", True),), "'enqueuedTime'", "declare it timestamp"),
        ((("sequenceNumber", "bigint", False),), "'sequenceNumber'", "NOT NULL"),
        ((("body", "binary", True), ("BODY", "binary", True)), "'body'", "appears twice"),
        ((("properties", "map<string,int>", True),), "'properties'", "map<string,string>"),
        ((), "schema has no columns", "body binary"),
    ],
)
def test_a_query_schema_that_does_not_fit_names_the_column_and_shows_one_that_works(fields, named, says) -> None:
    from pyspark.sql.types import (
        BinaryType,
        IntegerType,
        LongType,
        MapType,
        StringType,
        TimestampNTZType,
        TimestampType,
    )

    from eventhubs_spark.codec.schema import projection

    types = {"binary": BinaryType(), "string": StringType(), "timestamp": TimestampType(),
             "timestamp_ntz": TimestampNTZType(), "bigint": LongType(),
             "map<string,int>": MapType(StringType(), IntegerType())}  # fmt: skip
    with pytest.raises(OptionError) as caught:
        projection(_struct(*((name, types[kind], nullable) for name, kind, nullable in fields)))
    message = str(caught.value)
    assert named in message and says in message
    assert caught.value.example and caught.value.example.startswith(".schema(") and caught.value.example in message


_SCALE = {"": 1.0, "ms": 0.001, "s": 1.0, "sec": 1.0, "seconds": 1.0, "m": 60.0, "min": 60.0, "minutes": 60.0,
          "h": 3600.0, "hours": 3600.0}  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(
    st.integers(min_value=-5, max_value=10**6),
    st.sampled_from([None, 0, 5]),
    st.sampled_from([*_SCALE, "x", "days", "mss"]),
    st.sampled_from(["", " "]),
)
def test_a_duration_means_its_number_times_its_unit_or_is_refused_naming_the_option(whole, tenth, unit, gap):
    """Durations written from their parts (not from the parser's pattern), each checked against what it
    must mean: the number times the unit's seconds; a negative number or an unknown unit is refused."""
    text = f"{whole}{'' if tenth is None else f'.{tenth}'}{gap if unit else ''}{unit}"
    number = whole + (tenth or 0) / 10
    if whole < 0 or unit not in _SCALE:
        with pytest.raises(OptionError, match=r"eventhubs.receiverTimeout.*Example"):
            parse_duration("eventhubs.receiverTimeout", text)
        return
    assert parse_duration("eventhubs.receiverTimeout", text) == pytest.approx(number * _SCALE[unit])


def test_did_you_mean_goes_by_edit_distance_and_kafka_habits_name_our_option():
    """Issue 49: the most common option's typos suggested it (they got maxEventsPerPartition before); Spark's Kafka
    source's keys get our equivalent, not an unrelated example."""
    from eventhubs_spark.options import STREAM, read_options

    conn = "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=s;EntityPath=hub"
    for typo, meant in (("maxEventPerTrigger", "maxEventsPerTrigger"), ("maxEventsPerTriger", "maxEventsPerTrigger"),
                        ("consumerGroup", "eventhubs.consumerGroup"), ("eventhubs.startingPositon",
                        "eventhubs.startingPosition")):  # fmt: skip
        with pytest.raises(OptionError, match=f"did you mean '{meant}'"):
            read_options({"eventhubs.connectionString": conn, typo: "1"}, STREAM)
    for kafka, ours in (("startingOffsets", "eventhubs.startingPosition"), ("maxOffsetsPerTrigger",
                        "maxEventsPerTrigger"), ("kafka.bootstrap.servers", "eventhubs.connectionString"),
                        ("subscribe", "eventhubs.name")):  # fmt: skip
        with pytest.raises(OptionError, match=f"that is Spark's Kafka source; here it is '{ours}'"):
            read_options({"eventhubs.connectionString": conn, kafka: "x"}, STREAM)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_a_typo_within_two_edits_suggests_the_option_or_one_as_near(data):
    from eventhubs_spark.options import SPECS, STREAM, edit_distance, suggestion

    spec = data.draw(st.sampled_from([s for s in SPECS if STREAM in s.modes]))
    typo = spec.key
    for _ in range(data.draw(st.integers(1, 2))):
        at = data.draw(st.integers(0, len(typo) - 1))
        edit = data.draw(st.sampled_from(["drop", "swap", "change", "add"]))
        letter = data.draw(st.sampled_from("abcdefghijklmnopqrstuvwxyz"))
        if edit == "drop":
            typo = typo[:at] + typo[at + 1 :]
        elif edit == "swap" and at + 1 < len(typo):
            typo = typo[:at] + typo[at + 1] + typo[at] + typo[at + 2 :]
        elif edit == "change":
            typo = typo[:at] + letter + typo[at + 1 :]
        else:
            typo = typo[:at] + letter + typo[at:]
    if typo.lower() in {s.key.lower() for s in SPECS}:
        return  # the edits made another real option
    near = suggestion(typo, STREAM)
    assert near is not None, typo

    def distance(key: str) -> int:  # as suggestion() measures it: the eventhubs. prefix may be left out
        return min(edit_distance(typo.lower(), k) for k in {key.lower(), key.lower().removeprefix("eventhubs.")})

    assert distance(near) <= distance(spec.key), (typo, near, spec.key)
