"""Emulator pieces that need no socket: broker, selectors, SAS checks, config files, CLI flags."""

from __future__ import annotations

import json
import time

import pytest

from eventhubs_emulator import amqp
from eventhubs_emulator.__main__ import build, main
from eventhubs_emulator.broker import Broker, parse_batch, parse_message
from eventhubs_emulator.config import load_official_config, parse_hub_flag
from eventhubs_emulator.server import LinkError, Server, parse_entity, parse_selector


def message(body: bytes, key: str | None = None) -> bytes:
    out = b""
    if key is not None:
        out += amqp.encode_section(amqp.MESSAGE_ANNOTATIONS, {amqp.Symbol("x-opt-partition-key"): key})
    return out + amqp.encode_section(amqp.DATA, body)


def test_append_assigns_sequence_numbers_offsets_and_times():
    broker = Broker()
    hub = broker.add_hub("h", 2)
    p = hub.partitions[0]
    p.append([parse_message(message(b"a")), parse_message(message(b"bb"))], None)
    assert [e.sequence_number for e in p.events] == [0, 1]
    assert p.events[0].offset == 0 and p.events[1].offset == p.events[0].size
    assert p.events[0].enqueued_ms <= p.events[1].enqueued_ms
    props = p.properties()
    assert props["last_enqueued_sequence_number"] == 1
    assert props["last_enqueued_offset"] == str(p.events[1].offset)
    assert props["is_partition_empty"] is False


def test_stamped_annotations_replace_client_ones():
    m = parse_message(
        amqp.encode_section(
            amqp.MESSAGE_ANNOTATIONS,
            {amqp.Symbol("x-opt-sequence-number"): 99, amqp.Symbol("custom"): "keep"},
        )
        + amqp.encode_section(amqp.DATA, b"x")
    )
    broker = Broker()
    p = broker.add_hub("h", 1).partitions[0]
    p.append([m], None)
    annotations = amqp.section_value(p.events[0].body, 0)
    assert annotations["x-opt-sequence-number"] == 0
    assert annotations["custom"] == "keep"


def test_every_body_kind_is_kept_as_the_producer_sent_it_and_the_connector_reads_it():
    """Several data sections, a value body, a sequence body, a footer: stored byte for byte behind the
    service's annotations, and decoded by the connector as the SDK would see them."""
    from eventhubs_spark.amqp.messages import RawEvents
    from eventhubs_spark.codec.layout import decode_spans

    props = amqp.encode_section(amqp.APPLICATION_PROPERTIES, {"k": "v"})
    footer = amqp.encode_section(amqp.FOOTER, {amqp.Symbol("x-check"): "1"})
    bodies = [
        amqp.encode_section(amqp.DATA, b"first-") + amqp.encode_section(amqp.DATA, b"second") + footer,
        amqp.encode_section(amqp.AMQP_VALUE, "a value"),
        amqp.encode_section(amqp.AMQP_SEQUENCE, ["a", 1]) + amqp.encode_section(amqp.AMQP_SEQUENCE, ["b"]),
    ]
    p = Broker().add_hub("h", 1).partitions[0]
    p.append([parse_message(props + body) for body in bodies], None)
    raw = RawEvents()
    for event in p.events:
        assert event.body.endswith(props + bodies[event.sequence_number])  # kept as sent, after the annotations
        raw.append(event.sequence_number, event.header + event.delivery + event.body)
    batch, _ = decode_spans(*raw.spans(), "0", min_rows=0)
    rows = batch.to_pylist()
    assert [r["body"] for r in rows] == [b"first-second", b"a value", b'[["a", 1], ["b"]]']
    assert all(dict(r["properties"]) == {"k": "v"} for r in rows)


def test_batches_carry_the_outer_partition_key():
    inner = [message(b"1"), message(b"2")]
    outer = amqp.encode_section(amqp.MESSAGE_ANNOTATIONS, {amqp.Symbol("x-opt-partition-key"): "k"}) + b"".join(
        amqp.encode_section(amqp.DATA, m) for m in inner
    )
    events, key = parse_batch(outer)
    assert key == "k" and len(events) == 2


def test_routing_by_key_is_stable_and_round_robin_rotates():
    hub = Broker().add_hub("h", 8)
    assert {hub.route("device-7").id for _ in range(20)} == {hub.route("device-7").id}
    assert [hub.route(None).id for _ in range(9)] == ["0", "1", "2", "3", "4", "5", "6", "7", "0"]


def test_trim_retention_and_position_lookups():
    broker = Broker()
    hub = broker.add_hub("h", 1, retention_s=10)
    p = hub.partitions[0]
    for i in range(5):
        p.append([parse_message(message(bytes([i])))], None)
    assert p.trim_before(2) == 2
    assert p.beginning_sequence_number == 2
    assert p.index_of_sequence(0) == 0 and p.index_of_sequence(3) == 1 and p.index_of_sequence(99) == 3
    off = p.events[1].offset
    assert p.index_of_offset(off, inclusive=True) == 1
    assert p.index_of_offset(off, inclusive=False) == 2
    assert broker.apply_retention(now_ms=p.events[-1].enqueued_ms + 20_000) == 3
    props = p.properties()
    assert props["is_partition_empty"] is True
    assert props["begin_sequence_number"] == 5 and props["last_enqueued_sequence_number"] == 4


def test_bad_hubs_are_refused():
    broker = Broker()
    broker.add_hub("a", 1)
    with pytest.raises(ValueError, match="already exists"):
        broker.add_hub("A", 1)
    with pytest.raises(ValueError, match="between 1 and 1024"):
        broker.add_hub("b", 0)


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


def test_bad_selector():
    with pytest.raises(LinkError):
        parse_selector("nonsense")


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


def test_hub_flags():
    assert parse_hub_flag("t:8").partitions == 8
    assert parse_hub_flag("t").partitions == 4
    for bad in ("", ":3", "t:x", "t:0", "t:5000"):
        with pytest.raises(ValueError, match="--hub"):
            parse_hub_flag(bad)


def test_official_config(tmp_path):
    path = tmp_path / "Config.json"
    path.write_text(
        json.dumps(
            {
                "UserConfig": {
                    "NamespaceConfig": [
                        {
                            "Type": "EventHub",
                            "Name": "emulatorNs1",
                            "Entities": [
                                {"Name": "eh1", "PartitionCount": "2", "ConsumerGroups": [{"Name": "cg1"}]},
                                {"Name": "eh2", "PartitionCount": 3, "ConsumerGroups": []},
                            ],
                        }
                    ],
                    "LoggingConfig": {"Type": "File"},
                }
            }
        )
    )
    config = load_official_config(path)
    assert [(h.name, h.partitions, h.consumer_groups) for h in config.hubs] == [
        ("eh1", 2, ("$Default", "cg1")),
        ("eh2", 3, ("$Default",)),
    ]
    path.write_text("{}")
    with pytest.raises(ValueError, match="UserConfig.NamespaceConfig"):
        load_official_config(path)
    path.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        load_official_config(path)


def test_cli_errors(capsys):
    assert main(["--port", "0"]) == 2
    assert "no event hub configured" in capsys.readouterr().err
    assert main(["--hub", "x:y"]) == 2
    assert main(["--hub", "x", "--key", "novalue"]) == 2
    assert "NAME=KEY" in capsys.readouterr().err


def test_cli_build_merges_config_and_flags(tmp_path):
    import argparse

    from eventhubs_emulator.__main__ import add_arguments

    path = tmp_path / "Config.json"
    path.write_text(
        json.dumps({"UserConfig": {"NamespaceConfig": [{"Entities": [{"Name": "a", "PartitionCount": 1}]}]}})
    )
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    emu = build(parser.parse_args(["--config", str(path), "--hub", "b:2", "--key", "k=v"]))
    assert sorted(emu.broker.hubs) == ["a", "b"]
    assert emu.config.keys == {"k": "v"}


def test_cli_geo_replication_flags_and_their_errors():
    import argparse

    from eventhubs_emulator.__main__ import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    emu = build(parser.parse_args(["--hub", "g:2", "--geo-replicated", "--promote-every", "30", "--promote-lose", "3"]))
    assert emu.broker.hubs["g"].geo_replicated and (emu.promote_every, emu.promote_lose) == (30.0, 3)
    with pytest.raises(ValueError, match="--promote-every needs --geo-replicated"):
        build(parser.parse_args(["--hub", "g:2", "--promote-every", "30"]))
    with pytest.raises(ValueError, match="--promote-lose -1"):
        build(parser.parse_args(["--hub", "g:2", "--geo-replicated", "--promote-lose", "-1"]))


def test_the_module_entry_runs_the_emulator():
    import subprocess
    import sys

    shown = subprocess.run([sys.executable, "-m", "eventhubs_emulator", "--help"], capture_output=True, text=True,
                           timeout=60)  # fmt: skip
    assert shown.returncode == 0 and "--hub" in shown.stdout and "--websocket-port" in shown.stdout, shown.stderr


def test_the_connection_and_the_server_do_not_import_each_other():
    """Framing and links (connection.py) ask the service through an interface of their own (Service); only
    the server imports the connection."""
    import pathlib
    import re

    import eventhubs_emulator

    text = (pathlib.Path(eventhubs_emulator.__file__).parent / "connection.py").read_text()
    assert not re.search(r"^\s*(from \.server|from eventhubs_emulator\.server|import .*server)", text, re.M)


def test_the_emulator_imports_nothing_of_the_connector():
    import pathlib
    import re

    import eventhubs_emulator

    for path in pathlib.Path(eventhubs_emulator.__file__).parent.glob("*.py"):
        assert not re.search(r"^\s*(from|import) eventhubs_spark", path.read_text(), re.M), path.name


def test_an_attach_reply_sends_the_clients_source_back_in_its_own_amqp_types():
    """proton-j (the JVM SDKs) casts every field of the source in the ATTACH reply: the decoder's plain ints
    and lists must go back as uint, symbol and symbol arrays, or a Java receiver's connection fails with
    amqp:decode-error ("Incorrect type used")."""
    from eventhubs_emulator import amqp
    from eventhubs_emulator.connection import _reencode_terminus

    source = [
        "hub/ConsumerGroups/$Default/Partitions/0",
        0,  # durable: a uint on the wire, decoded as an int
        amqp.Symbol("session-end"),
        0,  # timeout
        False,
        None,
        None,
        {amqp.Symbol("apache.org:selector-filter:string"): "amqp.annotation.x-opt-offset > '-1'"},
        None,
        ["amqp:accepted:list"],  # outcomes: an array of symbols, decoded as a list
        "com.microsoft:one",  # capabilities: a single symbol may stand for an array of one
    ]
    wire = amqp.encode_value(_reencode_terminus(amqp.Described(amqp.ULong(amqp.SOURCE), source), amqp.SOURCE))
    assert wire[:3] == b"\x00\x53\x28"
    reply = _reencode_terminus(amqp.Described(amqp.ULong(amqp.SOURCE), source), amqp.SOURCE).value
    assert type(reply[1]) is amqp.UInt and type(reply[3]) is amqp.UInt and type(reply[2]) is amqp.Symbol
    assert reply[9] == amqp.Array("symbol", [amqp.Symbol("amqp:accepted:list")])
    assert reply[10] == amqp.Array("symbol", [amqp.Symbol("com.microsoft:one")])
    assert reply[0] == source[0] and reply[7] == source[7] and reply[4] is False
    assert b"Partitions/0\x43\xa3" in wire and b"\xf0" in wire  # uint0 after the address; an array32 on the wire


def test_a_hubs_partition_count_is_an_amqp_int():
    """The legacy Java SDK under the old Scala connector casts partition_count to Integer."""
    from eventhubs_emulator import amqp
    from eventhubs_emulator.broker import Broker

    broker = Broker()
    broker.add_hub("h", 3)
    count = broker.hubs["h"].properties()["partition_count"]
    assert type(count) is amqp.Int and count == 3
    assert amqp.encode_value(count) == b"\x54\x03"


def test_a_stop_signal_during_the_wait_is_seen_without_taking_a_lock():
    """The emulator's and the demo's stop flag: set from a real signal handler while the main thread waits.

    (A ``threading.Event`` set from a handler can deadlock on its own lock; the flag takes none.)
    """
    import os
    import signal
    import threading
    import time

    from eventhubs_emulator.__main__ import SignalFlag

    flag = SignalFlag()
    previous = signal.signal(signal.SIGUSR1, flag.set)
    try:
        timer = threading.Timer(0.2, os.kill, args=(os.getpid(), signal.SIGUSR1))
        timer.start()
        started = time.monotonic()
        assert flag.wait(10.0) is True
        assert time.monotonic() - started < 5.0
        assert flag.is_set()
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert SignalFlag().wait(0.05) is False


def test_a_run_of_deliveries_is_encoded_as_one_delivery_at_a_time_would_be():
    """encode_run (the pump's fast path) writes the same bytes and counts as encode_delivery called per event, and
    declines a run with an event too big for one frame, changing nothing."""
    from eventhubs_emulator.connection import Connection, OutLink, Session

    def link_on(conn: Connection) -> OutLink:
        session = Session(conn, channel=3, next_incoming_id=0, remote_incoming_window=10_000)
        session.next_outgoing_id = 4_294_967_290 - 10**9  # far from zero, as on a long-lived session
        link = OutLink(session, "r", remote_handle=1, handle=7, kind="events")
        link.credit, link.next_tag = 500, 0xFFFFFFFE  # the tag wraps inside the run
        return link

    def state(link: OutLink) -> tuple[int, ...]:
        s = link.session
        return (s.next_outgoing_id, s.remote_incoming_window, link.next_tag, link.credit, link.delivery_count)

    payloads = [bytes([i % 256]) * (i * 7 % 300) for i in range(40)]

    class Service:  # what a connection reads of its service when built
        host = "emulator"

    one, run = Connection(Service()), Connection(Service())  # type: ignore[arg-type]
    one.remote_max_frame = run.remote_max_frame = 1024
    a, b = link_on(one), link_on(run)
    expected = b"".join(one.encode_delivery(a, p) for p in payloads)
    assert run.encode_run(b, payloads) == expected
    assert state(a) == state(b)
    before = state(b)
    assert run.encode_run(b, [b"x", b"y" * 2000]) is None  # 2000 bytes need two frames of 1024
    assert state(b) == before
