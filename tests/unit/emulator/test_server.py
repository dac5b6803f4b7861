"""Unit tests of :mod:`eventhubs_emulator.server`."""

from __future__ import annotations

import time

import pytest

from eventhubs_emulator.broker import Broker
from eventhubs_emulator.server import Server, parse_entity, parse_selector


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("amqp.annotation.x-opt-sequence-number > '5'", ("x-opt-sequence-number", False, "5")),
        ("amqp.annotation.x-opt-sequence-number >= '5'", ("x-opt-sequence-number", True, "5")),
        ("amqp.annotation.x-opt-offset > '-1'", ("x-opt-offset", False, "-1")),
        ("amqp.annotation.x-opt-offset > '@latest'", ("x-opt-offset", False, "@latest")),
        ("amqp.annotation.x-opt-enqueued-time >= '1700000000000'", ("x-opt-enqueued-time", True, "1700000000000")),
    ],
)
def test_selectors(expr, expected):
    assert parse_selector(expr) == expected


def test_entity_addresses():
    assert parse_entity("amqps://127.0.0.1:5672/hub/ConsumerGroups/$Default/Partitions/3") == [
        "hub",
        "ConsumerGroups",
        "$Default",
        "Partitions",
        "3",
    ]
    assert parse_entity("$cbs") == ["$cbs"]


def _sas(resource: str, key_name: str, key: str, expiry: int) -> str:
    """A token exactly as the SDK signs one."""
    from azure.eventhub._pyamqp.utils import generate_sas_token

    return generate_sas_token(resource, key_name, key, expiry)


def test_sas_checks():
    server = Server(Broker(), keys={"policy": "secret"})
    future = int(time.time()) + 600
    audience = "sb://127.0.0.1:5672/hub"
    assert server.check_token(_sas(audience, "policy", "secret", future), audience)[0] == 202
    assert server.check_token(_sas("sb://127.0.0.1:5672/", "policy", "secret", future), audience)[0] == 202
    assert "invalid signature" in server.check_token(_sas(audience, "policy", "wrong", future), audience)[1]
    assert "does not exist" in server.check_token(_sas(audience, "nobody", "secret", future), audience)[1]
    assert "expired" in server.check_token(_sas(audience, "policy", "secret", 1), audience)[1]
    assert server.check_token(_sas("sb://h/other", "policy", "secret", future), audience)[0] == 401
    assert server.check_token("Bearer jwt", audience)[0] == 401
    assert Server(Broker()).check_token("anything", audience) == (202, "Accepted")
