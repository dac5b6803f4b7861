"""Unit tests of :mod:`eventhubs_spark.options.checks`."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eventhubs_emulator import capture as writer
from eventhubs_spark.capture.store import account_url
from eventhubs_spark.errors import OptionError
from eventhubs_spark.options import (
    SPECS,
    STREAM,
    read_options,
)
from tests.unit.support.capture_read import CONN as capture_read_CONN
from tests.unit.support.network import CONN as network_CONN
from tests.unit.support.network import net

CONN = "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=a2V5;EntityPath=hub"


def test_did_you_mean_goes_by_edit_distance_and_kafka_habits_name_our_option():
    """Issue 49: the most common option's typos suggested it (they got maxEventsPerPartition before); Spark's Kafka
    source's keys get our equivalent, not an unrelated example."""
    from eventhubs_spark.options import read_options

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


def test_capture_options_are_checked_with_examples():
    base = {"eventhubs.connectionString": capture_read_CONN}
    options = read_options({**base, "eventhubs.capture.location": "abfss://cap@acct.dfs.core.windows.net/x"}, "stream")
    assert options.capture is not None and options.capture.namespace == "ns" and options.capture.hub == "hub"
    assert options.capture.late_file_wait == 60.0
    with pytest.raises(OptionError, match=r"eventhubs.capture.location 's3://b/x': a local path.*abfss://"):
        read_options({**base, "eventhubs.capture.location": "s3://b/x"}, "batch")
    with pytest.raises(OptionError, match=r"eventhubs.capture.sasToken goes with eventhubs.capture.location"):
        read_options({**base, "eventhubs.capture.sasToken": "sig=1"}, "batch")
    with pytest.raises(OptionError, match=r"nameFormat.*no \{Second\}"):
        read_options(
            {
                **base,
                "eventhubs.capture.location": "/x",
                "eventhubs.capture.nameFormat": writer.DEFAULT_NAME_FORMAT.replace("/{Second}", ""),
            },
            "batch",
        )
    with pytest.raises(OptionError, match="did you mean"):
        read_options({**base, "eventhubs.capture.lateFileWiat": "1s"}, "batch")
    from eventhubs_spark.capture.store import local_root

    assert [local_root(x) for x in ("/c", "file:///c", "dbfs:/mnt/c", "abfss://cap@acct.dfs.core.windows.net/x")] == [
        "/c", "/c", "/dbfs/mnt/c", None]  # fmt: skip
    assert account_url("abfss://cap@acct.dfs.core.windows.net/x") == "https://acct.blob.core.windows.net"
    assert account_url("http://127.0.0.1:10000/devstoreaccount1/cap/x") == "http://127.0.0.1:10000/devstoreaccount1"
    assert "TOPSECRET" not in repr(read_options({**base, "eventhubs.capture.location": "/x",
                                                 "eventhubs.capture.sasToken": "TOPSECRET"}, "batch"))  # fmt: skip


def test_proxy_credentials_go_in_pairs_and_the_password_never_shows():
    base = {"eventhubs.httpProxy.hostname": "proxy.corp", "eventhubs.httpProxy.port": "3128"}
    with pytest.raises(OptionError, match="username and eventhubs.httpProxy.password"):
        net(**base, **{"eventhubs.httpProxy.username": "svc"})
    options = read_options(
        {"eventhubs.connectionString": network_CONN, **base, "eventhubs.httpProxy.username": "svc",
         "eventhubs.httpProxy.password": "pr0xy-S3CRET"}, "stream",
    )  # fmt: skip
    assert "pr0xy-S3CRET" not in repr(options) and "pr0xy-S3CRET" not in str(options.settings)
    assert options.settings.network.proxy is not None and options.settings.network.proxy.username == "svc"
    revived = pickle.loads(pickle.dumps(options.settings))  # travels to executors and the receiver service
    assert revived.network == options.settings.network and revived.pool_key() == options.settings.pool_key()


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_a_typo_within_two_edits_suggests_the_option_or_one_as_near(data):
    from eventhubs_spark.options import edit_distance, suggestion

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


def test_the_edit_distance_lets_an_edit_fall_between_the_letters_of_a_swap():
    """Found by the typo property above: ``eventhubs.name`` with its first two letters swapped and a letter put
    between them is two edits away, and gets its suggestion."""
    from eventhubs_spark.options import edit_distance, suggestion

    assert edit_distance("ca", "abc") == 2 and edit_distance("eventhubs.name", "vaeenthubs.name") == 2
    assert edit_distance("kitten", "sitting") == 3 and edit_distance("ab", "ba") == 1
    assert edit_distance("aaaaa", "bbbbb") == 4, "past the limit: limit + 1"
    assert suggestion("vaeenthubs.name", STREAM) == "eventhubs.name"


@pytest.mark.parametrize(
    ("option", "value", "said"),
    [
        ("eventhubs.json.schemaEvolutionMode", "addNewColumn", "got 'addNewColumn' (did you mean 'addNewColumns'?)"),
        ("eventhubs.json.schemaEvolutionMode", "RESCUES", "got 'RESCUES' (did you mean 'rescue'?)"),
        ("eventhubs.useExclusiveReceiver", "ture", "got 'ture' (did you mean 'true'?)"),
        ("eventhubs.auth", "sasToke", "got 'sasToke' (did you mean 'sasToken'?)"),
    ],
)
def test_a_value_one_edit_from_an_allowed_one_gets_did_you_mean_as_documented(option, value, said):
    """The value as the user gave it, the allowed ones as documented (addNewColumns, not addnewcolumns), and the
    one it is an edit away from, also in the example."""
    from eventhubs_spark.options import read_options

    raw = {"eventhubs.connectionString": CONN, option: value}
    if option.startswith("eventhubs.json"):
        raw["eventhubs.json.schemaLocation"] = "/tmp/unused-json-schema"
    with pytest.raises(OptionError) as caught:
        read_options(raw, "stream")
    message = str(caught.value)
    assert said in message, message
    near = said.split("'")[3]
    assert caught.value.example == f".option({option!r}, {near!r})"
    if option.endswith("schemaEvolutionMode"):
        assert "addNewColumns, rescue, failOnNewColumns, none" in message


def test_a_value_far_from_every_allowed_one_gets_no_guess():
    from eventhubs_spark.options import read_options

    with pytest.raises(OptionError) as caught:
        read_options({"eventhubs.connectionString": CONN, "eventhubs.useExclusiveReceiver": "maybe"}, "stream")
    assert "did you mean" not in str(caught.value) and "got 'maybe'." in str(caught.value)
