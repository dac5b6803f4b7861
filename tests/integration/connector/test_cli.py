"""The ``eventhubs-spark`` command: send, checkpoints and the demo, against the emulator and Azurite."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from eventhubs_spark.checkpoints import Checkpoint, Ownership
from eventhubs_spark.checkpoints.blob import BlobCheckpointStore
from eventhubs_spark.cli import main
from tests.integration.sdk_helpers import receive, send


def _ends(eventhub) -> dict[str, int]:
    props = eventhub.emulator.partition_properties
    return {str(p): props(eventhub.name, p)["last_enqueued_sequence_number"] + 1 for p in range(eventhub.partitions)}


def test_send_generated_events_to_a_partition(eventhub, capsys):
    assert main(["send", "--connection-string", eventhub.connection_string, "--count", "250", "--size", "300",
                 "--partition", "2"]) == 0  # fmt: skip
    assert _ends(eventhub) == {"0": 0, "1": 0, "2": 250, "3": 0}
    err = capsys.readouterr().err
    assert "250/250" in err and "sent 250 events" in err
    assert "SharedAccessKey" not in err


def test_send_without_a_partition_or_key_spreads_the_events_over_every_partition(eventhub, capsys):
    """As the sink does: 1,000 small events fit in one batch, which the service would put on one partition. And as
    the sink sends, every partition's link is on one connection: through the SDK's own paths each partition's first
    send opened a connection of its own (and paused 50 ms a step of opening it: 15.9 s for 32 partitions)."""
    before = eventhub.emulator.stats()["connections_accepted"]
    assert main(["send", "--connection-string", eventhub.connection_string, "--count", "1000"]) == 0
    assert _ends(eventhub) == {"0": 250, "1": 250, "2": 250, "3": 250}
    assert "sent 1000 events" in capsys.readouterr().err
    opened = eventhub.emulator.stats()["connections_accepted"] - before
    assert opened <= 2, f"{opened} connections: more than one to send on and the process's management connection"


def test_send_a_json_lines_file_with_the_connection_string_from_the_environment(eventhub, tmp_path, monkeypatch):
    lines = [json.dumps({"id": i, "city": "Oslo"}) for i in range(7)]
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(lines) + "\n\n")
    monkeypatch.setenv("EVENTHUBS_CONNECTION_STRING", eventhub.connection_string)
    assert main(["send", "--file", str(path), "--partition-key", "oslo"]) == 0
    got = receive(eventhub.connection_string, 7, starting_position="-1")
    assert sorted(e.body_as_str() for e in got) == sorted(lines)
    assert {e.partition_key for e in got} == {b"oslo"}


def test_send_to_a_namespace_connection_string_names_the_hub_with_its_own_flag(eventhub, capsys):
    """A namespace-level string (no EntityPath, the portal's first): the error names the CLI's --hub, not an
    option the CLI has no flag for, and --hub sends there."""
    namespace_only = eventhub.connection_string.split(";EntityPath=")[0]
    assert main(["send", "--connection-string", namespace_only, "--count", "3"]) == 2
    err = capsys.readouterr().err
    assert "EntityPath=<event hub name> is missing" in err and "--hub" in err and "eventhubs.name" not in err
    assert main(["send", "--connection-string", namespace_only, "--hub", eventhub.name, "--count", "3"]) == 0
    assert sum(_ends(eventhub).values()) == 3


def test_a_send_that_goes_unanswered_is_sent_again_and_said(capsys, monkeypatch):
    """The send command's batch goes into a black hole that heals later: after --send-timeout it is sent again
    over a new connection, and the command says the hub may hold those events twice (when the hole heals, the
    first copy is stored too). Never a repeat nobody is told of."""
    from eventhubs_emulator import Emulator
    from eventhubs_spark.amqp import sdk
    from tests.integration.sdk_helpers import wait_until

    emulator = Emulator({"cli-doubt": 1}).start()
    try:
        connection = emulator.connection_string("cli-doubt")
        real, holed = sdk.send_once, []

        def first_into_a_hole(client, batch, timeout, shared=None):
            if not holed:  # open the partition's producer (on the client's connection), then hole every connection
                client._start_producer(batch._partition_id, timeout)
                client._producers[batch._partition_id]._open_with_retry()
                holed.append(emulator.black_hole(4.0))
            return real(client, batch, timeout, shared)

        monkeypatch.setattr(sdk, "send_once", first_into_a_hole)
        assert main(["send", "--connection-string", connection, "--count", "10", "--send-timeout", "1.5"]) == 0
        err = capsys.readouterr().err
        assert holed[0] >= 1 and "sent 10 events" in err
        assert "warning: 10 of them were sent again" in err and "may hold those twice" in err, err

        def twice() -> bool:
            return emulator.partition_properties("cli-doubt", 0)["last_enqueued_sequence_number"] + 1 == 20

        wait_until(twice, timeout=30, message="the held send stored when the hole heals")
        sends = emulator.stored_sends("cli-doubt")
        assert [s["count"] for s in sends] == [10, 10] and sends[1]["client_let_go"], sends
        assert main(["send", "--connection-string", connection, "--count", "1", "--send-timeout", "0"]) == 2
        assert "--send-timeout must be more than 0 seconds (e.g. --send-timeout 30)" in capsys.readouterr().err
    finally:
        emulator.stop()


def test_a_send_refused_as_busy_waits_while_the_namespace_recovers_and_past_that_stops_saying_what_was_sent(
    capsys, monkeypatch
):
    """The namespace refuses sends as busy (its throughput units spent): the command waits as the SDKs do and sends
    again while the namespace may recover (here its clock moves on meanwhile), so a throttled send succeeds; when
    it stays busy (a clock held still) past the command's patience, each batch is tried three times more, then the
    command stops with exit 1, naming the events not sent and how many were; nothing is stored twice or skipped."""
    import threading

    from eventhubs_emulator import Emulator
    from eventhubs_spark.cli.send import _Sender

    monkeypatch.setattr(_Sender, "BUSY_WAIT", 0.2)
    monkeypatch.setattr(_Sender, "BUSY_PATIENCE", 1.0)
    emulator = Emulator({"cli-busy": 1}).start()
    try:
        connection = emulator.connection_string("cli-busy")
        now = [0.0]
        emulator.set_throughput_units(1, clock=lambda: now[0])
        assert main(["send", "--connection-string", connection, "--count", "1500", "--size", "20"]) == 0
        capsys.readouterr()
        later = threading.Timer(0.5, lambda: now.__setitem__(0, 60.0))  # a minute on: the units are back
        later.start()
        assert main(["send", "--connection-string", connection, "--count", "10", "--size", "20"]) == 0
        later.join()
        assert "sent 10 events" in capsys.readouterr().err
        assert emulator.throttling()["throttled_requests"] >= 1
        assert emulator.partition_properties("cli-busy", 0)["last_enqueued_sequence_number"] == 1509

        assert main(["send", "--connection-string", connection, "--count", "1500", "--size", "20"]) in (0, 1)
        capsys.readouterr()  # the units spent again, the clock now held still
        assert main(["send", "--connection-string", connection, "--count", "10", "--size", "20"]) == 1
        err = capsys.readouterr().err
        assert "error: events 1-10 were not acknowledged after 3 attempts (each attempt was refused" in err, err
        assert "server-busy" in err and "The 0 events before them were sent." in err, err
        stored = emulator.partition_properties("cli-busy", 0)["last_enqueued_sequence_number"]
        assert main(["send", "--connection-string", connection, "--count", "1", "--size", "20"]) == 1
        assert emulator.partition_properties("cli-busy", 0)["last_enqueued_sequence_number"] == stored
    finally:
        emulator.stop()


def test_send_without_a_connection_string_says_how_to_give_one(monkeypatch):
    monkeypatch.delenv("EVENTHUBS_CONNECTION_STRING", raising=False)
    with pytest.raises(SystemExit, match="--connection-string or set EVENTHUBS_CONNECTION_STRING"):
        main(["send", "--count", "1"])


@pytest.mark.azurite
def test_checkpoints_shows_checkpoints_owners_and_lag(eventhub, azurite, capsys):
    for p in range(4):
        send(eventhub.connection_string, [f"e{i}" for i in range(10)], partition_id=str(p))
    store = BlobCheckpointStore.from_connection_string(azurite.connection_string, "cli-checkpoints")
    store.ensure_container()
    ns, hub = eventhub.emulator.fully_qualified_namespace, eventhub.name
    store.update_checkpoint(Checkpoint(ns, hub, "$Default", "0", 4, "400"))
    store.update_checkpoint(Checkpoint(ns, hub, "$Default", "1", 9, "900"))
    store.claim_ownership([Ownership(ns, hub, "$Default", "0", "query-a")])
    args = ["checkpoints", "--connection-string", eventhub.connection_string, "--storage-connection-string",
            azurite.connection_string, "--container", "cli-checkpoints"]  # fmt: skip
    assert main([*args, "--json"]) == 0
    rows = {r["partition"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["0"]["checkpoint"] == 4 and rows["0"]["lag"] == 5 and rows["0"]["owner"] == "query-a"
    assert rows["1"]["lag"] == 0 and rows["1"]["owner"] == ""
    assert rows["2"]["checkpoint"] == "" and rows["2"]["lag"] == 10, "no checkpoint: the whole partition is lag"
    assert main(args) == 0
    table = capsys.readouterr().out
    assert "query-a" in table and "lag" in table and "AccountKey" not in table


@pytest.mark.slow
def test_the_demo_runs_a_spark_query_to_the_end(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "eventhubs_spark.cli", "demo", "--events", "400", "--rate", "400", "--seconds", "120"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "the Spark query read 400 of 400 events" in proc.stdout
    assert "events/s" in proc.stdout and "lag" in proc.stdout
    assert "[Stage" not in proc.stdout + proc.stderr  # no console progress bars between the table's rows
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr[-3000:]  # a healthy run shows no traceback
    assert "starting Spark (20-40 s" in proc.stdout and "Spark started in" in proc.stdout  # progress, said honestly


@pytest.mark.slow
def test_ctrl_c_stops_the_demo_cleanly_with_one_line(tmp_path):
    """A terminal sends SIGINT to the whole foreground process group: the demo, and everything it
    started that shares the group."""
    import os
    import signal
    import time

    out = tmp_path / "out.txt"
    with out.open("w") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "eventhubs_spark.cli", "demo", "--events", "100000", "--rate", "200"],
            stdout=sink, stderr=subprocess.STDOUT, cwd=tmp_path, start_new_session=True,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 180
            while (
                "waiting for the query's first micro-batch" in out.read_text()[-600:]
                or "events/s" not in out.read_text()
            ):
                assert proc.poll() is None and time.monotonic() < deadline, out.read_text()[-3000:]
                time.sleep(0.5)
            text = out.read_text()
            assert "Ctrl-C stops it" in text and "ends by itself" in text
            os.killpg(proc.pid, signal.SIGINT)
            assert proc.wait(timeout=90) == 130
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    text = out.read_text()
    tail = text[text.rindex("events/s") :]
    for noise in ("Traceback", "KeyboardInterrupt", "StackOverflowError", "Exception", "ERROR"):
        assert noise not in tail, tail[-3000:]
    assert [line for line in tail.splitlines() if line.startswith("stopped:")], tail[-1000:]


def test_demo_help_gives_every_flag_its_default(capsys):
    with pytest.raises(SystemExit):
        main(["demo", "--help"])
    text = capsys.readouterr().out
    for flag, default in (("--partitions", "4"), ("--events", "2000"), ("--rate", "500"), ("--seconds", "90")):
        assert flag in text and f"(default: {default}" in text
    assert "Ctrl-C" in text and "--child" not in text


@pytest.mark.azurite
def test_checkpoints_on_a_container_that_does_not_exist_says_so_in_one_line(eventhub, azurite, capsys):
    args = ["checkpoints", "--connection-string", eventhub.connection_string, "--storage-connection-string",
            azurite.connection_string, "--container", "no-such-container"]  # fmt: skip
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err, err
    assert "'no-such-container' does not exist" in err and "create" in err
    assert "AccountKey" not in err


@pytest.mark.azurite
def test_dev_azurite_starts_the_blob_service_as_the_connector_needs_it(tmp_path):
    """``./dev azurite`` (the Getting started page's checkpoint store): it prints a connection string the storage
    SDK works with, the API-version check skipped."""
    import os
    import signal

    from tests.conftest import ROOT, free_port

    port = free_port()
    proc = subprocess.Popen([str(ROOT / "dev"), "azurite"], cwd=ROOT, env={**os.environ, "PORT": str(port)},
                            stdout=subprocess.PIPE, text=True, start_new_session=True)  # fmt: skip
    try:
        assert proc.stdout is not None
        conn = next(line.strip() for line in proc.stdout if line.strip().startswith("DefaultEndpointsProtocol="))
        assert f"127.0.0.1:{port}" in conn
        store = BlobCheckpointStore.from_connection_string(conn, f"dev-azurite-{port}")
        deadline = time.monotonic() + 30
        while True:  # it prints before it listens
            try:
                store.ensure_container()
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        store.update_checkpoint(Checkpoint("ns", "hub", "$Default", "0", 4, "400"))
        assert [c.sequence_number for c in store.list_checkpoints("ns", "hub", "$Default")] == [4]
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)


def test_json_schema_prints_what_a_json_read_infers_to_pin_it(eventhub, capsys):
    """The latest events by default, or from a starting position; DDL a read takes back, or Spark's JSON."""
    import json

    from eventhubs_spark.json_bodies.types import parse_schema
    from tests.integration.sdk_helpers import send

    send(eventhub.connection_string, ['{"id": 1, "reading": {"temp": 20}}', '{"id": 2, "reading": {"temp": 20.5}}',
                                      "not json", '{"id": 3, "ok": true}'], partition_id="0")  # fmt: skip
    assert main(["json-schema", "--connection-string", eventhub.connection_string]) == 0
    ddl = capsys.readouterr().out.strip()
    assert ddl == "`id` bigint, `reading` struct<`temp`:double>, `ok` boolean"
    assert parse_schema(ddl)  # eventhubs.json.schema takes it as it is
    assert main(["json-schema", "--connection-string", eventhub.connection_string, "--json", "--sample", "40",
                 "--starting-position", '{"offset": "-1"}']) == 0  # fmt: skip
    assert [f["name"] for f in json.loads(capsys.readouterr().out)["fields"]] == ["id", "reading", "ok"]
    empty = eventhub.connection_string.replace(f"EntityPath={eventhub.name}", "EntityPath=nothing-here")
    eventhub.emulator.add_hub("nothing-here", 1)
    assert main(["json-schema", "--connection-string", empty]) == 2
    assert "no JSON object among the 0 events" in capsys.readouterr().err
