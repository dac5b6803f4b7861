"""Unit tests of :mod:`eventhubs_spark.amqp.receive_connections`."""

from __future__ import annotations

from eventhubs_spark.auth.settings import parse_connection_string
from eventhubs_spark.interprocess.task_ranges import ReceiverConfig
from eventhubs_spark.process.runtime import current


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
