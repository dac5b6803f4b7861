"""Unit tests of :mod:`eventhubs_spark.interprocess.task_ranges`."""

from __future__ import annotations

from eventhubs_spark.auth.settings import parse_connection_string
from eventhubs_spark.executor.partition_receiver import PartitionReceiver
from eventhubs_spark.interprocess.task_ranges import RangeResult, ReceiverConfig
from tests.unit.support.displacement import ScriptedReceiver
from tests.unit.support.reader import CONN


def read(receiver: PartitionReceiver, start: int, end: int) -> list[int]:
    result = RangeResult()
    seqs = [seq for chunk in receiver.read_range(start, end, True, result) for seq in chunk.seqs]
    assert result.read == len(seqs)
    return seqs


def test_displaced_while_idle_reopens_at_its_position_and_reads_every_event_once():
    receiver = ScriptedReceiver([None, None])
    assert read(receiver, 0, 10) == list(range(10))
    receiver.taken_while_idle = True  # e.g. the driver's offset lookup between micro-batches
    assert read(receiver, 10, 25) == list(range(10, 25))
    assert (receiver.opens, receiver.displaced_idle, receiver.displaced_reading) == (2, 1, 0)


def test_a_link_the_service_closed_while_idle_reopens_at_its_position_too():
    receiver = ScriptedReceiver([None, None])
    assert read(receiver, 0, 10) == list(range(10))
    receiver.closed_by_service = "amqp:link:detach-forced: AmqpMessageConsumer.IdleTimerExpired: Idle timeout"
    assert read(receiver, 10, 20) == list(range(10, 20))
    assert (receiver.opens, receiver.closed_idle, receiver.displaced_idle) == (2, 1, 0)


def test_displaced_while_reading_reopens_once_and_goes_on():
    receiver = ScriptedReceiver([5, None])
    assert read(receiver, 0, 20) == list(range(20))
    assert (receiver.opens, receiver.displaced_reading) == (2, 1)


def test_an_idle_displacement_does_not_use_up_the_one_reopen_of_a_read():
    receiver = ScriptedReceiver([None, 4, None])
    assert read(receiver, 0, 6) == list(range(6))
    receiver.taken_while_idle = True
    assert read(receiver, 6, 30) == list(range(6, 30))
    assert (receiver.displaced_idle, receiver.displaced_reading) == (1, 1)


def test_the_next_task_reads_on_after_a_read_that_was_displaced_once():
    receiver = ScriptedReceiver([5, None, None])
    assert read(receiver, 0, 10) == list(range(10))
    assert read(receiver, 10, 15) == list(range(10, 15)), "a new task gets its own reopen"


def test_the_sdks_slow_decoder_is_said_once_per_partition_with_its_count(caplog):
    from eventhubs_spark import source
    from eventhubs_spark.interprocess.task_ranges import RangeRequest

    settings = parse_connection_string(CONN)
    first = RangeRequest(ReceiverConfig(consumer_group="slow-path"), "7", 100, 200, True, settings=settings)
    with caplog.at_level("WARNING", logger="eventhubs_spark"):
        assert source.slow_path_taken(first, 12, 100)
        assert not source.slow_path_taken(RangeRequest(first.config, "7", 200, 300, True, settings=settings), 5, 100)
        assert source.slow_path_taken(RangeRequest(first.config, "8", 0, 10, True, settings=settings), 1, 10)
    said = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(said) == 2 and "partition 7" in said[0] and "12 of 100 events in [100, 200)" in said[0], said
    assert "partition 8" in said[1] and "TOPSECRET" not in " ".join(said)
