"""Every notebook in ``notebooks/`` runs end to end against the emulator (and Azurite where it needs one)."""

from __future__ import annotations

import collections
import datetime as dt
import json
import time
from pathlib import Path

import pytest

from tests.integration.notebook_runner import cells, run_notebook
from tests.integration.sdk_helpers import receive, send

pytestmark = pytest.mark.spark
NOTEBOOKS = Path(__file__).resolve().parents[3] / "notebooks"


def test_every_notebook_is_in_databricks_source_format_and_tested():
    names = sorted(p.name for p in NOTEBOOKS.glob("*.py"))
    assert len(names) >= 4
    tested = {"01_stream_json_to_table.py", "02_write_to_event_hubs.py", "03_backfill_between_times.py",
              "04_scale_out_with_ownership.py", "05_watch_lag.py",
              "06_avro_schema_registry.py", "07_backfill_from_capture.py"}  # fmt: skip
    # 06's test is in test_avro_spark.py (LocalEntra, registry)
    assert set(names) == tested, "a new notebook needs a test here"
    for name in names:
        assert cells(NOTEBOOKS / name), name


def test_stream_json_to_table(spark, eventhub, tmp_path):
    for p, device in enumerate(["a", "b", "c", "d"]):
        bodies = [json.dumps({"device": device, "temperature": 20.0 + i, "ts": "2024-05-01T00:00:00Z"})
                  for i in range(5)]  # fmt: skip
        send(eventhub.connection_string, [*bodies, "not json"], partition_id=str(p))
    run = run_notebook(
        NOTEBOOKS / "01_stream_json_to_table.py", spark,
        secrets={("eventhubs", "connection-string"): eventhub.connection_string},
        widgets={"output_path": str(tmp_path / "out"), "checkpoint_path": str(tmp_path / "cp"),
                 "schema_path": str(tmp_path / "schema"), "available_now": "true"},
    )  # fmt: skip
    (table,) = run.tables()
    got = {r["device"]: (r["readings"], r["avg_temperature"]) for r in table}
    assert got == {"a": (5, 22.0), "b": (5, 22.0), "c": (5, 22.0), "d": (5, 22.0), None: (4, None)}
    # the schema was inferred and kept, the timestamps parsed, and the bodies that were not JSON kept
    assert (tmp_path / "schema" / "_schemas" / "0").exists()
    written = spark.read.parquet(str(tmp_path / "out"))
    assert written.schema["ts"].dataType.simpleString() == "timestamp"
    assert sorted(r._rescued_data for r in written.where("device is null").collect()) == ['{"_body": "not json"}'] * 4
    (figure,) = run.figures()
    assert type(figure).__name__ == "Figure" and figure.axes, "events per second and lag are plotted"


def test_write_to_event_hubs(spark, eventhubs_emulator, eventhub, tmp_path):
    source = f"{eventhub.name}src"
    eventhubs_emulator.add_hub(source, 2)
    source_conn = eventhubs_emulator.connection_string(source)
    send(source_conn, [f"raw-{i}" for i in range(5)])
    run_notebook(
        NOTEBOOKS / "02_write_to_event_hubs.py", spark,
        secrets={("eventhubs", "connection-string"): eventhub.connection_string,
                 ("eventhubs", "source-connection-string"): source_conn},
        widgets={"checkpoint_path": str(tmp_path / "cp"), "available_now": "true"},
    )  # fmt: skip
    events = receive(eventhub.connection_string, 9, starting_position="-1")
    bodies = [e.body_as_str() for e in events]
    orders = [json.loads(b) for b in bodies if b.startswith('{"order_id"')]
    assert sorted(o["order_id"] for o in orders) == [1, 2, 3, 4]
    enriched = [json.loads(b) for b in bodies if b.startswith('{"seen_at"')]
    assert sorted(e["event"] for e in enriched) == [f"raw-{i}" for i in range(5)]
    assert len(bodies) == 9


def test_backfill_between_times(spark, eventhub):
    send(eventhub.connection_string, [f"before-{i}" for i in range(6)])
    time.sleep(1.1)
    start = dt.datetime.now(dt.timezone.utc)
    send(eventhub.connection_string, [f"inside-{i}" for i in range(8)])
    time.sleep(0.5)
    end = dt.datetime.now(dt.timezone.utc)
    time.sleep(0.6)
    send(eventhub.connection_string, [f"after-{i}" for i in range(4)])
    run = run_notebook(
        NOTEBOOKS / "03_backfill_between_times.py", spark,
        secrets={("eventhubs", "connection-string"): eventhub.connection_string},
        widgets={"start": start.isoformat().replace("+00:00", "Z"), "end": end.isoformat().replace("+00:00", "Z")},
    )  # fmt: skip
    per_minute, per_partition = run.tables()
    assert sum(r["events"] for r in per_minute) == 8
    assert sum(r["events"] for r in per_partition) == 8
    backfill = run.namespace["backfill"]
    assert sorted(r.body.decode() for r in backfill.select("body").collect()) == [f"inside-{i}" for i in range(8)]


@pytest.mark.azurite
def test_scale_out_with_ownership(spark, eventhub, azurite, tmp_path):
    for p in range(4):
        send(eventhub.connection_string, [f"o-{p}-{i}" for i in range(10)], partition_id=str(p))
    run = run_notebook(
        NOTEBOOKS / "04_scale_out_with_ownership.py", spark,
        secrets={("eventhubs", "connection-string"): eventhub.connection_string,
                 ("eventhubs", "checkpoint-store-connection-string"): azurite.connection_string},
        widgets={"container": "notebook-owners", "output_path": str(tmp_path / "out"), "run_seconds": "90"},
    )  # fmt: skip
    (owners,) = run.tables()
    counts = collections.Counter(r["owner"] for r in owners)
    assert counts == {"orders-query-1": 2, "orders-query-2": 2}
    read = [r.body for q in ("orders-query-1", "orders-query-2")
            for r in spark.read.parquet(str(tmp_path / "out" / q)).collect()]  # fmt: skip
    assert sorted(read) == sorted(f"o-{p}-{i}" for p in range(4) for i in range(10))


def test_watch_lag(spark, eventhub, tmp_path):
    for p, n in enumerate([30, 10, 0, 0]):
        if n:
            send(eventhub.connection_string, [f"lag-{p}-{i}" for i in range(n)], partition_id=str(p))
    run = run_notebook(
        NOTEBOOKS / "05_watch_lag.py", spark,
        secrets={("eventhubs", "connection-string"): eventhub.connection_string},
        widgets={"output_path": str(tmp_path / "out"), "checkpoint_path": str(tmp_path / "cp"), "run_seconds": "8"},
    )  # fmt: skip
    per_trigger, now = run.tables()
    first = {r["partition"]: r["events_behind"] for r in per_trigger if r["at"] == per_trigger[0]["at"]}
    assert first == {"0": 30, "1": 10, "2": 0, "3": 0}  # before the first batch: every event is behind
    assert {r["partition"]: (r["committed"], r["events_behind"], r["seconds_behind"]) for r in now} == {
        "0": ("30", 0, 0.0),
        "1": ("10", 0, 0.0),
        "2": ("0", 0, 0.0),
        "3": ("0", 0, 0.0),
    }
    (figure,) = run.figures()
    assert len(figure.axes) == 2 and all(axis.lines for axis in figure.axes), "events and seconds behind are plotted"


@pytest.mark.azurite
def test_backfill_from_capture(spark, azurite, tmp_path):
    """07: history in Capture files in a blob container, the rest in the hub; every event once, in a table."""
    from eventhubs_emulator import Emulator

    capture = {"destination": "blob", "connection_string": azurite.connection_string,
               "container": "notebook-capture", "window_seconds": 3600}  # fmt: skip
    with Emulator({"history": 2}, capture=capture) as emu:
        conn = emu.connection_string("history")
        for p in ("0", "1"):
            send(conn, [f"old-{p}-{i}" for i in range(30)], partition_id=p)
        emu.capture_flush()
        for p in ("0", "1"):
            send(conn, [f"new-{p}-{i}" for i in range(10)], partition_id=p)
            emu.trim("history", p, 20)  # the hub begins mid-history: [0, 20) only in Capture
        run = run_notebook(
            NOTEBOOKS / "07_backfill_from_capture.py", spark,
            secrets={("eventhubs", "connection-string"): conn,
                     ("eventhubs", "capture-storage-connection-string"): azurite.connection_string},
            widgets={"capture_location": f"{azurite.account_url}/notebook-capture", "capture_namespace": "emulator",
                     "output_path": str(tmp_path / "out"), "checkpoint_path": str(tmp_path / "cp"),
                     "available_now": "true"},
        )  # fmt: skip
    (table,) = run.tables()
    assert sorted((r["partition"], r["first"], r["last"], r["events"]) for r in table) == [
        ("0", 0, 39, 40),
        ("1", 0, 39, 40),
    ]
