"""Unit tests of :mod:`eventhubs_spark.interprocess.service_protocol`."""

from __future__ import annotations

import json

import pytest

from eventhubs_spark.errors import DataLossError, OptionError
from eventhubs_spark.interprocess.task_ranges import RangeRequest, ReceiverConfig
from tests.unit.support.service import SETTINGS, request


def full_request() -> RangeRequest:
    """A request with every kind of field set: secrets, an Entra identity, a proxy, ownership."""
    import dataclasses

    from eventhubs_spark.auth.credentials import EntraSettings
    from eventhubs_spark.auth.network import HttpProxy, NetworkSettings
    from eventhubs_spark.auth.secret import Secret

    settings = dataclasses.replace(
        SETTINGS,
        entra=EntraSettings("servicePrincipal", "t", "c", Secret("client-S3CRET"), None, None, None, None, None, True),
        network=NetworkSettings(
            "amqpWebSockets", HttpProxy("proxy", 3128, "u", Secret("proxy-S3CRET")), "sb://gw:443", "/ca.pem"
        ),
    )
    config = ReceiverConfig("$Default", 300, 12.5, False, 7, 100, 1 << 20)
    return RangeRequest(config, "3", 10, 20, False, 30.0, "owner-1", frozenset({"3", "4"}), True, settings=settings)


def fields(wire: bytes) -> dict:
    """All of a range request's fields, from the two JSON lines it crosses as."""
    shared, own = wire.split(b"\n")
    return {**json.loads(shared), **json.loads(own)}


def as_written(data: dict) -> bytes:
    """A request's fields written as the connector writes them: the shared ones on the first line, the rest after."""
    from eventhubs_spark.interprocess.task_ranges import SHARED_FIELDS

    shared = {k: v for k, v in data.items() if k in SHARED_FIELDS}
    own = {k: v for k, v in data.items() if k not in SHARED_FIELDS}
    return json.dumps(shared, separators=(",", ":")).encode() + b"\n" + json.dumps(own, separators=(",", ":")).encode()


def test_a_request_crosses_as_json_and_comes_back_equal():
    from eventhubs_spark.interprocess import service_protocol

    full = full_request()
    wire = service_protocol.encode_request(full)
    assert fields(wire)["settings"]["network"]["proxy"]["hostname"] == "proxy"  # plain JSON
    assert service_protocol.decode_request(json.dumps(fields(wire)).encode()) == full  # one object of all its fields
    assert service_protocol.decode_request(wire) == full
    assert service_protocol.decode_request(service_protocol.encode_request(request(1, 2))) == request(1, 2)


def test_a_request_has_the_fields_it_had_before_a_remote_read_shared_them_and_a_remote_read_no_settings():
    """RangeRequest takes RemoteRead's range fields once (it extends it), and the JSON that crosses the service's
    socket keeps exactly the fields it had; what a task asks of a home carries the range alone."""
    from eventhubs_spark.interprocess import service_protocol
    from eventhubs_spark.interprocess.task_ranges import RemoteRead

    before = {"settings", "config", "partition", "start", "end", "fail_on_data_loss", "idle_timeout", "owner",
              "owned", "retry", "query", "driver", "home", "homes", "ports", "bind", "range_id"}  # fmt: skip
    full = full_request()
    assert set(fields(service_protocol.encode_request(full))) == before
    remote = RemoteRead.of(full)
    assert type(remote) is RemoteRead and "settings" not in json.loads(service_protocol.encode_request(remote))
    assert remote.request(full.settings) == full


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (lambda d: d.update(extra=1), "unknown field(s) 'extra' for RangeRequest"),
        (lambda d: d["settings"].update(__reduce__="os.system"), "unknown field(s) '__reduce__'"),
        (lambda d: d.pop("partition"), "missing field(s) partition"),
        (lambda d: d.update(start="10"), "request.start: expected a whole number"),
        (lambda d: d.update(start=True), "request.start: expected a whole number"),
        (lambda d: d.update(retry=1), "request.retry: expected true or false"),
        (lambda d: d["settings"].update(connection_string="plain text"), "connection_string: expected a secret"),
        (lambda d: d["settings"].update(namespace=None), "settings.namespace: expected text"),
        (lambda d: d.update(owner=None, idle_timeout=None), None),  # optional fields may be null
        (lambda d: d.update(owned="3"), "request.owned: expected a list"),
        (lambda d: d.update(config=[1, 2]), "request.config: expected an object of ReceiverConfig"),
    ],
)
def test_a_request_that_is_not_exactly_a_range_request_is_refused(change, words):
    from eventhubs_spark.interprocess import service_protocol

    service_protocol.decode_request(service_protocol.encode_request(full_request()))  # its shared part now known
    data = fields(service_protocol.encode_request(full_request()))
    change(data)
    # written as the connector writes it (two lines) and as one object of all its fields
    for wire in (as_written(data), json.dumps(data, sort_keys=True).encode()):
        if words is None:
            assert service_protocol.decode_request(wire).owner is None
            continue
        with pytest.raises(service_protocol.ProtocolError) as info:
            service_protocol.decode_request(wire)
        assert words in str(info.value)
        assert "S3CRET" not in str(info.value) and "TOPSECRET" not in str(info.value)


def test_a_querys_requests_have_their_shared_part_encoded_and_checked_once_and_each_keeps_its_own_range():
    """A query's tasks send the same settings, config and stream fields with every range: encoded once while the
    same objects come, rebuilt and checked once while the same text comes (60 us of every 10-event task); each
    request's own fields every time, and other settings as themselves."""
    import dataclasses

    from eventhubs_spark.interprocess import service_protocol
    from eventhubs_spark.interprocess.task_ranges import Home

    full = full_request()
    ranges = [dataclasses.replace(full, start=s, end=s + 10, range_id=s + 1, home=Home("e1", ("h",), 9) if s else None)
              for s in (0, 10, 20)]  # fmt: skip
    decoded = [service_protocol.decode_request(service_protocol.encode_request(r)) for r in ranges]
    assert decoded == ranges
    assert decoded[1].settings is decoded[2].settings and decoded[1].config is decoded[2].config  # checked once
    other = dataclasses.replace(full, settings=dataclasses.replace(full.settings, hub="other-hub"), start=5)
    back = service_protocol.decode_request(service_protocol.encode_request(other))
    assert back == other and back.settings.hub == "other-hub"
    assert service_protocol.decode_request(service_protocol.encode_request(ranges[0])) == ranges[0]
    # the same fields in another order (another writer), on two lines or one: the same request
    data = fields(service_protocol.encode_request(ranges[1]))
    assert service_protocol.decode_request(as_written(dict(reversed(data.items())))) == ranges[1]
    assert service_protocol.decode_request(json.dumps(dict(reversed(data.items()))).encode()) == ranges[1]


@pytest.mark.parametrize(
    "payload",
    [b"\x80\x04\x95 pickled", b"\xff\xfe", b"[]", b"null", b"x" * (2 << 20), b"[]\n{}", b"{}\n[]", b"{\n}", b"\n"],
)
def test_what_is_not_a_json_request_is_refused(payload):
    from eventhubs_spark.interprocess import service_protocol

    with pytest.raises(service_protocol.ProtocolError):
        service_protocol.decode_request(payload)


def test_every_public_error_of_the_package_is_known_by_name_and_crosses_the_service_as_itself():
    """An error raised in the receiver service (or a home) reaches the task as its own type: every public
    EventHubsError of the package is in errors.ERROR_TYPES (it would otherwise arrive as a plain EventHubsError)."""
    import importlib
    import pkgutil

    import eventhubs_spark
    from eventhubs_spark import errors
    from eventhubs_spark.interprocess import service_protocol

    for module in pkgutil.walk_packages(eventhubs_spark.__path__, "eventhubs_spark."):
        if not module.name.endswith("__main__"):
            importlib.import_module(module.name)

    def public(cls: type) -> list[type]:
        found = [] if cls.__name__.startswith("_") else [cls]
        return found + [c for sub in cls.__subclasses__() for c in public(sub)]

    missing = sorted(f"{c.__module__}.{c.__name__}" for c in public(errors.EventHubsError)
                     if errors.ERROR_TYPES.get(c.__name__) is not c)  # fmt: skip
    assert not missing, f"public errors not in errors.ERROR_TYPES: {missing}"
    for name, cls in errors.ERROR_TYPES.items():
        error = cls("what went wrong")  # every type takes its message first
        if isinstance(error, errors.OptionError):
            error.example = ".option('eventhubs.x', '1')"
        error.retriable = not cls.retriable or name == "TransientError"
        back = service_protocol.decode_error(service_protocol.encode_error(error))
        assert type(back) is cls and str(back) == "what went wrong", name
        assert getattr(back, "example", None) == getattr(error, "example", None), name
        if cls in (errors.NetworkError, errors.RegistryError):
            assert back.retriable == error.retriable, name


def test_errors_cross_as_json_with_their_type_example_and_retriability():
    from eventhubs_spark.errors import NetworkError
    from eventhubs_spark.interprocess import service_protocol

    for error in (
        NetworkError("refused", retriable=True),
        OptionError("eventhubs.x: bad", ".option('eventhubs.x', '1')"),
        DataLossError("gone"),
    ):
        back = service_protocol.decode_error(service_protocol.encode_error(error))
        assert type(back) is type(error) and str(back) == str(error)
        assert getattr(back, "example", None) == getattr(error, "example", None)
        assert back.retriable == error.retriable
    assert "KeyError: 'k'" in str(service_protocol.decode_error(service_protocol.encode_error(KeyError("k"))))
    with pytest.raises(service_protocol.ProtocolError):
        service_protocol.decode_error(b"\x80\x04pickle")
