"""Unit tests of :mod:`eventhubs_spark.auth.settings`."""

from __future__ import annotations

import pickle

import pytest

from eventhubs_spark.auth.settings import parse_connection_string
from eventhubs_spark.errors import OptionError
from eventhubs_spark.interprocess.task_ranges import ReceiverConfig
from eventhubs_spark.process.runtime import current
from tests.unit.support.reader import CONN


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
