"""Unit tests of :mod:`eventhubs_spark.options.typed`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from eventhubs_spark.errors import OptionError
from eventhubs_spark.options import (
    SPECS,
    parse_options,
    read_options,
    write_options,
)
from eventhubs_spark.positions.event_positions import (
    Earliest,
    Latest,
)
from tests.unit.support.network import CONN as network_CONN
from tests.unit.support.position_fidelity import CONN as position_fidelity_CONN
from tests.unit.support.reader import CONN as reader_CONN

CONN = "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=s;EntityPath=hub"


def test_the_avro_options_go_together():
    base = {"eventhubs.connectionString": avro_CONN}
    with pytest.raises(OptionError, match="eventhubs.avro.schema or eventhubs.avro.schemaId"):
        read_options({**base, "eventhubs.avro.schemaRegistry": "ns.servicebus.windows.net"}, "stream")
    with pytest.raises(OptionError, match="not both"):
        read_options({**base, "eventhubs.avro.schemaRegistry": "ns.servicebus.windows.net",
                      "eventhubs.avro.schema": '"long"', "eventhubs.avro.schemaId": "x"}, "stream")  # fmt: skip
    with pytest.raises(OptionError, match="eventhubs.avro.schema would be unused"):
        read_options({**base, "eventhubs.avro.schema": '"long"'}, "stream")
    with pytest.raises(OptionError, match="did you mean 'eventhubs.avro.schemaRegistry'"):
        read_options({**base, "eventhubs.avro.schemaRegistery": "ns.servicebus.windows.net"}, "stream")
    with pytest.raises(OptionError, match="expected one of failfast, permissive"):
        read_options({**base, "eventhubs.avro.mode": "DROPMALFORMED"}, "stream")
    with pytest.raises(OptionError, match="eventhubs.avro.schemaGroup"):
        write_options({**base, "eventhubs.avro.schemaRegistry": "ns.servicebus.windows.net"})
    avro = {"eventhubs.avro.schemaRegistry": "ns.servicebus.windows.net", "eventhubs.avro.schema": '"long"'}
    options = read_options({**base, **avro, "eventhubs.avro.mode": "permissive"}, "batch")
    assert options.avro_mode == "PERMISSIVE" and options.avro_registry == "ns.servicebus.windows.net"
    # the registry signs in with Entra ID, the hub still with its connection string
    assert options.settings.auth_method == "connectionString" and options.settings.entra is not None


def test_the_json_registry_options_go_together():
    base = {"eventhubs.connectionString": avro_CONN}
    registry = {"eventhubs.json.schemaRegistry": "ns.servicebus.windows.net"}
    with pytest.raises(OptionError, match="needs the registered schema .* eventhubs.json.schemaId, e.g."):
        read_options({**base, **registry}, "batch")
    with pytest.raises(OptionError, match="eventhubs.json.schemaId, eventhubs.json.validate would be unused"):
        read_options({**base, "eventhubs.json.schemaId": "s1", "eventhubs.json.validate": "true"}, "stream")
    with pytest.raises(OptionError, match="Avro .* or JSON .*not both"):
        read_options({**base, **registry, "eventhubs.json.schemaId": "s1",
                      "eventhubs.avro.schemaRegistry": "ns.servicebus.windows.net", "eventhubs.avro.schema": '"long"'},
                     "stream")  # fmt: skip
    with pytest.raises(OptionError, match="both type the value column"):
        read_options({**base, **registry, "eventhubs.json.schemaId": "s1", "eventhubs.json.schema": "id bigint"},
                     "stream")  # fmt: skip
    with pytest.raises(OptionError, match="eventhubs.json.schemaGroup.*or a registered schema's id"):
        write_options({**base, **registry})
    with pytest.raises(OptionError, match="eventhubs.json.schemaGroup would be unused"):
        write_options({**base, "eventhubs.json.schemaGroup": "g"})
    written = write_options({**base, **registry, "eventhubs.json.schemaGroup": "g", "eventhubs.json.validate": "true"})
    assert written.json_group == "g" and written.json_validate and written.json_schema_name is None
    read = read_options({**base, **registry, "eventhubs.json.schemaId": "s1",
                         "eventhubs.json.schemaLocation": "/tmp/s"}, "stream")  # fmt: skip
    assert read.json_schema_id == "s1" and read.json_registry == "ns.servicebus.windows.net"
    assert read.settings.entra is not None  # the registry signs in with Entra ID


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
        raw = {"eventhubs.connectionString": bad_input_CONN, **raw}
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


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([s.key for s in SPECS if s.key != "eventhubs.connectionString"]), _TEXT,
       st.sampled_from(["stream", "batch", "write"]))  # fmt: skip
@example("eventhubs.namespace", "[", "stream")  # urlparse raised ValueError ("Invalid IPv6 URL")
@example("eventhubs.namespace", "ns:99999", "stream")  # a port out of range
@example("eventhubs.startingPosition", '{"offset": "\u00b2"}', "stream")  # "²".isdigit() is True
def test_any_option_value_is_accepted_or_refused_clearly(key, value, mode):
    try:
        parse_options({"eventhubs.connectionString": bad_input_CONN, key: value}, mode)
    except OptionError as exc:
        assert str(exc), "an empty message"
        assert "TOPSECRET" not in str(exc)


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


@pytest.mark.parametrize(
    "name",
    [
        "connector.example.json",
        "connector.entra.example.json",
        "connector.proxy.example.json",
        "connector.avro.example.json",
        "connector.databricks.example.json",
        "connector.capture.example.json",
        "connector.json.example.json",
        "connector.json-registry.example.json",
    ],
)
def test_the_example_configurations_in_conf_are_valid(name, monkeypatch):
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
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
        raw = {"eventhubs.connectionString": bad_input_CONN, **raw}
    with pytest.raises(OptionError) as info:
        parse_options(raw, "stream")
    assert option.lower() in str(info.value).lower()
    assert "TOPSECRET" not in str(info.value)


def test_network_options_apply_to_writes_too():
    options = write_options({"eventhubs.connectionString": network_CONN, "eventhubs.transportType": "amqpWebSockets"})
    assert options.settings.network.websockets


def test_the_network_is_part_of_the_pool_key():
    plain = read_options({"eventhubs.connectionString": network_CONN}, "batch").settings
    websockets = read_options({"eventhubs.connectionString": network_CONN, "eventhubs.transportType": "amqpWebSockets"},
                              "batch").settings  # fmt: skip
    assert plain.pool_key() != websockets.pool_key()


def test_the_batch_default_start_differs_from_the_old_connector():
    """The old connector started batch reads at the end of the stream (so read nothing by default);
    here a batch read starts at the beginning. Streams start at the end in both."""
    conn = "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=n;SharedAccessKey=k;EntityPath=hub"
    batch = parse_options({"eventhubs.connectionString": conn}, "batch")
    stream = parse_options({"eventhubs.connectionString": conn}, "stream")
    assert batch.default_start.to_json() == {"offset": "-1"}
    assert stream.default_start.to_json() == {"offset": "@latest"}


def test_read_options_on_a_write_are_ignored_with_one_warning_and_typos_still_fail(caplog):
    from eventhubs_spark.errors import OptionError

    shared = {
        "eventhubs.connectionString": position_fidelity_CONN,
        "maxEventsPerTrigger": "1000",
        "eventhubs.consumerGroup": "spark",
        "eventhubs.startingPosition": '{"offset": "-1"}',
    }
    with caplog.at_level("WARNING", logger="eventhubs_spark"):
        parse_options(shared, "write")
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1, warnings
    for key in ("maxEventsPerTrigger", "eventhubs.startingPosition"):
        assert key in warnings[0]
    assert "ignored on this write" in warnings[0]
    # the consumer group is a write's too: an exactly-once write reads its own events back with it
    assert "consumerGroup" not in warnings[0]
    with pytest.raises(OptionError, match="did you mean"):
        parse_options({**shared, "eventhubs.consumerGrop": "x"}, "write")
    with pytest.raises(OptionError, match="maxEventsPerTrigger"):
        parse_options({**shared, "maxEventsPerTrigger": "lots"}, "write")


def test_options_are_case_insensitive_and_typed():
    options = parse_options(
        {
            "EVENTHUBS.CONNECTIONSTRING": reader_CONN,
            "maxeventspertrigger": "500",
            "eventhubs.receiverTimeout": "PT30S",
            "failOnDataLoss": "FALSE",
        },
        "stream",
    )
    assert options.settings.connection_string.reveal() == reader_CONN and options.settings.hub == "hub"
    assert options.max_events_per_trigger == 500
    assert options.receiver_timeout == 30.0
    assert options.fail_on_data_loss is False
    assert options.consumer_group == "$Default"
    assert isinstance(options.default_start, Latest) and options.starting_position is None
    batch = parse_options({"eventhubs.connectionString": reader_CONN}, "batch")
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
        raw = {"eventhubs.connectionString": reader_CONN, **raw}
    with pytest.raises(OptionError, match=message):
        parse_options(raw, mode)


def test_every_read_option_lands_in_the_typed_options_or_the_sign_in(monkeypatch):
    """Nothing is parsed and then left unused: setting any read option changes what the readers get (the
    typed options, or the connection settings where sign-in options go)."""

    from eventhubs_spark.options import READ

    # databricks.serviceCredential needs Databricks' entry point in the process: the tests' stand-in
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "databricks_standin"))

    store = {"eventhubs.checkpointStore.connectionString": "UseDevelopmentStorage=true",
             "eventhubs.checkpointStore.container": "c"}  # fmt: skip
    by_connection = {"eventhubs.connectionString": reader_CONN, **store}
    by_namespace = {"eventhubs.namespace": "ns.servicebus.windows.net", "eventhubs.name": "hub", **store}
    proxy = {**by_connection, "eventhubs.httpProxy.hostname": "proxy", "eventhubs.httpProxy.port": "3128"}
    principal = {"eventhubs.entra.tenantId": "t", "eventhubs.entra.clientId": "c", "eventhubs.entra.clientSecret": "s"}
    avro = {**by_connection, "eventhubs.avro.schemaRegistry": "ns.servicebus.windows.net",
            "eventhubs.avro.schema": '"long"'}  # fmt: skip
    # option -> (options it is set beside, the value it gets)
    cases = {
        "eventhubs.connectionString": ({"eventhubs.namespace": None, "eventhubs.name": None, **store}, reader_CONN),
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
        "eventhubs.json.schema": (by_connection, "id bigint"),
        "eventhubs.json.schemaLocation": (by_connection, "/tmp/json-schema"),
        "eventhubs.json.schemaEvolutionMode": ({**by_connection, "eventhubs.json.schema": "id bigint"}, "none"),
        "eventhubs.json.rescuedDataColumn": ({**by_connection, "eventhubs.json.schema": "id bigint"}, "_bad"),
        "eventhubs.json.sampleEvents": ({**by_connection, "eventhubs.json.schemaLocation": "/tmp/s"}, "5"),
        "eventhubs.json.keepBody": ({**by_connection, "eventhubs.json.schema": "id bigint"}, "true"),
        "eventhubs.avro.corruptRecordColumn": ({**avro, "eventhubs.avro.mode": "PERMISSIVE"}, "_bad"),
        "eventhubs.json.schemaRegistry": ({**by_connection, "eventhubs.json.schemaId": "s1"},
                                          "ns.servicebus.windows.net"),
        "eventhubs.json.schemaId": ({**by_connection, "eventhubs.json.schemaRegistry": "ns.servicebus.windows.net"},
                                    "s2"),
        "eventhubs.json.validate": ({**by_connection, "eventhubs.json.schemaRegistry": "ns.servicebus.windows.net",
                                     "eventhubs.json.schemaId": "s1"}, "true"),
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


avro_CONN = CONN
bad_input_CONN = CONN
