"""Spark reads and writes a hub the way real networks allow: AMQP over TLS, AMQP over WebSockets, and
WebSockets through a real HTTP proxy with and without credentials; streams and batches, with the
executor's receiver service on and off."""

from __future__ import annotations

import json

import pytest

from tests.integration.network_helpers import network_options
from tests.integration.sdk_helpers import receive, send

pytestmark = pytest.mark.spark

ROUTES = ("tls", "websockets", "proxy", "proxy-with-credentials")


def route_options(request, eventhub, route: str) -> dict[str, str]:
    proxy = None
    if route == "proxy":
        proxy = request.getfixturevalue("http_proxy")
    elif route == "proxy-with-credentials":
        proxy = request.getfixturevalue("http_proxy_with_credentials")
    return network_options(eventhub, "tls" if route == "tls" else "websockets", proxy)


def with_options(builder, options: dict[str, str]):
    for key, value in options.items():
        builder = builder.option(key, value)
    return builder


@pytest.mark.parametrize("route", ROUTES)
def test_batch_and_stream_reads_and_writes(spark, eventhub, tmp_path, request, route):
    options = route_options(request, eventhub, route)

    # a batch write and a stream write, over the route
    df = spark.range(300).selectExpr(f"concat('{route}-batch-', cast(id as string)) as body")
    with_options(df.write.format("eventhubs").mode("append"), options).save()
    source = tmp_path / "in"
    source.mkdir()
    (source / "part.json").write_text("\n".join(json.dumps({"body": f"{route}-stream-{i}"}) for i in range(100)))
    stream_write = with_options(
        spark.readStream.schema("body string").json(str(source)).writeStream.format("eventhubs"), options
    )
    query = stream_write.option("checkpointLocation", str(tmp_path / "write-checkpoint")).trigger(availableNow=True)
    query = query.start()
    query.awaitTermination(180)
    assert query.exception() is None, query.exception()
    expected = sorted([f"{route}-batch-{i}" for i in range(300)] + [f"{route}-stream-{i}" for i in range(100)])
    sent = receive(eventhub.connection_string, 400, consumer_group="other", starting_position="-1")
    assert sorted(e.body_as_str() for e in sent) == expected

    # batch reads, each worker reading for itself and through the receiver service
    for service in ("false", "true"):
        reader = with_options(spark.read.format("eventhubs"), {**options, "eventhubs.receiverService": service})
        rows = reader.load().selectExpr("cast(body as string) as body").collect()
        assert sorted(r.body for r in rows) == expected, service

    # stream reads, through the receiver service (the streams' default) and without it
    send(eventhub.connection_string, [f"{route}-late-{i}" for i in range(50)], partition_id="1")
    for service in ("true", "false"):
        name = f"net_{route.replace('-', '_')}_{service}"
        reader = with_options(
            spark.readStream.format("eventhubs"),
            {**options, "eventhubs.receiverService": service, "eventhubs.startingPosition": '{"offset": "-1"}'},
        )
        query = (
            reader.load().selectExpr("cast(body as string) as body").writeStream.format("memory").queryName(name)
            .option("checkpointLocation", str(tmp_path / f"read-{service}")).trigger(availableNow=True).start()
        )  # fmt: skip
        query.awaitTermination(180)
        assert query.exception() is None, query.exception()
        rows = [r.body for r in spark.sql(f"select body from {name}").collect()]
        assert sorted(rows) == sorted(expected + [f"{route}-late-{i}" for i in range(50)]), service


def test_a_proxy_that_wants_credentials_fails_the_query_naming_them(spark, eventhub, http_proxy_with_credentials):
    from pyspark.errors import PySparkException

    options = network_options(eventhub, "websockets")
    options.update(http_proxy_with_credentials.options(with_credentials=False))
    send(eventhub.connection_string, ["x"], partition_id="0")
    with pytest.raises(PySparkException) as caught:  # Spark's own error, carrying the connector's message
        with_options(spark.read.format("eventhubs"), options).load().collect()
    text = str(caught.value)
    assert "407" in text and "eventhubs.httpProxy.username" in text
    # with a wrong password, the query fails the same way and the password shows nowhere: not in the error,
    # not in the plan
    options.update({"eventhubs.httpProxy.username": "spark", "eventhubs.httpProxy.password": "wrong-pass-31"})
    frame = with_options(spark.read.format("eventhubs"), options).load()
    with pytest.raises(PySparkException) as caught:
        frame.collect()
    assert "407" in str(caught.value) and "wrong-pass-31" not in str(caught.value)
    assert "wrong-pass-31" not in frame._jdf.queryExecution().toString()
