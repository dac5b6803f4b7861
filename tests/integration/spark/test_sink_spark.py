"""The sink end to end: Spark writes, the plain SDK receives and checks every event."""

from __future__ import annotations

import pytest

from eventhubs_emulator import Emulator
from tests.integration.sdk_helpers import receive, wait_until

pytestmark = pytest.mark.spark


def received_by_partition(eventhub, total: int) -> dict[str, list]:
    counts = {
        str(p): eventhub.emulator.partition_properties(eventhub.name, p)["last_enqueued_sequence_number"] + 1
        for p in range(eventhub.partitions)
    }
    assert sum(counts.values()) == total, counts
    out = {}
    for p, n in counts.items():
        out[p] = receive(eventhub.connection_string, n, partition_id=p, starting_position="-1") if n else []
        assert len(out[p]) == n
    return out


def write(df, eventhub, **options):
    writer = df.write.format("eventhubs").option("eventhubs.connectionString", eventhub.connection_string)
    for k, v in options.items():
        writer = writer.option(k, v)
    writer.mode("append").save()


def test_batch_write_arrives_complete_and_spread_over_partitions(spark, eventhub):
    df = spark.range(5000).selectExpr("concat('row-', cast(id as string)) as body")
    write(df, eventhub)
    events = received_by_partition(eventhub, 5000)
    bodies = [e.body_as_str() for es in events.values() for e in es]
    assert sorted(bodies) == sorted(f"row-{i}" for i in range(5000))
    assert all(len(es) > 500 for es in events.values())  # dealt over all four partitions


def test_binary_bodies_properties_and_explicit_partitions(spark, eventhub):
    df = spark.createDataFrame(
        [(b"\x00\x01", 2, {"kind": "a"}), (b"\xff", 2, None), (b"plain", 0, {"n": "1", "m": "x"})],
        "body binary, partitionId int, properties map<string,string>",
    )
    write(df, eventhub)
    events = received_by_partition(eventhub, 3)
    by_body = {b"".join(e.body): e for e in events["2"]}  # rows of two Spark tasks: any order
    assert set(by_body) == {b"\x00\x01", b"\xff"}
    assert by_body[b"\x00\x01"].properties == {b"kind": b"a"}
    assert not by_body[b"\xff"].properties
    assert events["0"][0].properties == {b"n": b"1", b"m": b"x"}
    assert events["1"] == [] and events["3"] == []


def test_one_key_always_lands_on_one_partition(spark, eventhub):
    df = spark.range(400).selectExpr(
        "cast(id as string) as body", "concat('device-', cast(id % 7 as string)) as partitionKey"
    )
    write(df, eventhub)
    where: dict[str, set[str]] = {}
    for p, events in received_by_partition(eventhub, 400).items():
        for e in events:
            where.setdefault(e.partition_key.decode() if isinstance(e.partition_key, bytes) else e.partition_key,
                             set()).add(p)  # fmt: skip
    assert len(where) == 7 and all(len(ps) == 1 for ps in where.values()), where


def test_stream_write_arrives_complete(spark, eventhub, tmp_path):
    source = tmp_path / "in"
    source.mkdir()
    for i in range(3):
        (source / f"part{i}.json").write_text("\n".join(f'{{"body": "s{i}-{j}"}}' for j in range(100)))
    query = (
        spark.readStream.schema("body string").json(str(source))
        .writeStream.format("eventhubs")
        .option("eventhubs.connectionString", eventhub.connection_string)
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(availableNow=True)
        .start()
    )  # fmt: skip
    query.awaitTermination(120)
    assert query.exception() is None
    events = received_by_partition(eventhub, 300)
    assert sorted(e.body_as_str() for es in events.values() for e in es) == sorted(
        f"s{i}-{j}" for i in range(3) for j in range(100)
    )


def test_stream_to_stream_pipeline(spark, eventhubs_emulator, eventhub, tmp_path):
    """Read one hub, transform, write another: events flow through while both queries run."""
    target = f"{eventhub.name}-out"
    eventhubs_emulator.add_hub(target, 2)
    out_conn = eventhubs_emulator.connection_string(target)
    from tests.integration.sdk_helpers import send

    send(eventhub.connection_string, [f"x{i}" for i in range(50)])
    query = (
        spark.readStream.format("eventhubs")
        .option("eventhubs.connectionString", eventhub.connection_string)
        .option("eventhubs.startingPosition", '{"offset": "-1"}')
        .load()
        .selectExpr("upper(cast(body as string)) as body", "partition as partitionKey")
        .writeStream.format("eventhubs")
        .option("eventhubs.connectionString", out_conn)
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(processingTime="1 second")
        .start()
    )
    try:

        def arrived() -> int:
            return sum(eventhubs_emulator.partition_properties(target, p)["last_enqueued_sequence_number"] + 1
                       for p in range(2))  # fmt: skip

        wait_until(lambda: arrived() == 50, timeout=90, message="transformed events")
    finally:
        query.stop()
    got = [
        e.body_as_str() for p in "01" for e in receive(out_conn, 50, timeout=5, partition_id=p, starting_position="-1")
    ]
    assert sorted(got) == sorted(f"X{i}" for i in range(50))


def test_oversize_events_fail_with_size_and_limit(spark):
    with Emulator({"small": 2}, max_message_size=64 * 1024) as emu:
        df = spark.createDataFrame([("x" * 100_000,)], "body string")
        with pytest.raises(Exception) as info:
            df.write.format("eventhubs").option("eventhubs.connectionString", emu.connection_string("small")).mode(
                "append"
            ).save()
        message = str(info.value)
        assert "exceeds the hub's maximum message size of 65536 bytes" in message
        assert "its body of 100000 bytes" in message
        assert all(emu.partition_properties("small", p)["is_partition_empty"] for p in range(2))


@pytest.mark.parametrize(
    ("ddl", "rows", "message"),
    [
        ("body string, extra int", [("a", 1)], "unexpected column 'extra'"),
        ("body int", [(1,)], "column 'body' must be string or binary"),
        ("payload string", [("a",)], "unexpected column 'payload'"),
        ("partitionKey string", [("a",)], "no 'body' column"),
        ("body string, partitionKey int", [("a", 1)], "column 'partitionKey' must be string"),
        (
            "body string, properties map<string,int>",
            [("a", {"k": 1})],
            "column 'properties' must be map<string,string>",
        ),
        ("body string, partitionKey string, partitionId string", [("a", "k", "0")], "both 'partitionKey'"),
        ("body string", [(None,)], "column 'body' is null"),
        ("body string, partitionId string, partition string", [("a", "0", "0")], "either 'partitionId' or 'partition'"),
    ],
)
def test_bad_rows_and_columns_fail_clearly(spark, eventhub, ddl, rows, message):
    df = spark.createDataFrame(rows, ddl)
    with pytest.raises(Exception, match=message):
        write(df, eventhub)


def test_overwrite_is_refused(spark, eventhub):
    df = spark.createDataFrame([("a",)], "body string")
    with pytest.raises(Exception, match="append-only") as info:
        df.write.format("eventhubs").option("eventhubs.connectionString", eventhub.connection_string).mode(
            "overwrite"
        ).save()
    # Spark's own refusal of its default mode suggests Overwrite beside Append: the message says why not, and how
    assert "Overwrite (which Spark suggests" in str(info.value) and ".mode('append')" in str(info.value)


def test_the_default_save_mode_is_refused_by_spark_naming_append(spark, eventhub):
    """Spark refuses ErrorIfExists (the default) for every Python sink before the sink is asked; its message
    names the fix, which the README shows: .mode("append")."""
    df = spark.createDataFrame([("a",)], "body string")
    with pytest.raises(Exception) as info:
        df.write.format("eventhubs").option("eventhubs.connectionString", eventhub.connection_string).save()
    text = str(info.value)
    assert "ErrorIfExists" in text and "Append" in text, text
    assert eventhub.emulator.partition_properties(eventhub.name, 0)["last_enqueued_sequence_number"] == -1


def test_a_sink_pointed_at_a_wrong_port_fails_in_seconds_naming_what_it_tried(spark):
    """A write's very first connection refused (a wrong host or port): the task says so within about
    FIRST_CONNECT_GRACE, naming the host, port and transport given, not after eventhubs.operationTimeout's five
    minutes of retries."""
    import time

    from tests.conftest import free_port

    port = free_port()  # closed again: nothing listens there
    conn = f"Endpoint=sb://127.0.0.1:{port};SharedAccessKeyName=a;SharedAccessKey=b;EntityPath=hub;UseDevelopmentEmulator=true"
    df = spark.createDataFrame([("a",)], "body string")
    started = time.monotonic()
    with pytest.raises(Exception) as info:
        df.write.format("eventhubs").option("eventhubs.connectionString", conn).mode("append").save()
    took = time.monotonic() - started
    assert took < 60, f"{took:.0f} s"
    assert f"127.0.0.1:{port}" in str(info.value) and "refused the connection" in str(info.value)
