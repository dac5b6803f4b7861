"""Unit tests of :mod:`eventhubs_spark.auth.settings`."""

from __future__ import annotations

import pickle

import pytest

from eventhubs_spark.auth.settings import parse_connection_string
from eventhubs_spark.errors import OptionError
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
