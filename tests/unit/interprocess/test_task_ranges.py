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


def test_a_range_request_pickles_its_shared_part_once_and_comes_back_equal():
    """Spark pickles each input partition on its own; a batch's requests share their settings, config, query key
    and driver, pickled once (the same bytes in each) and unpickled once per process. Interleaved requests of two
    queries each come back as they were, with their own settings, however the caches turn over."""
    import pickle

    from eventhubs_spark.interprocess import task_ranges
    from eventhubs_spark.interprocess.task_ranges import DriverAddress, Home, RangeRequest, new_query_key

    def batch(hub: str, count: int) -> list[RangeRequest]:
        settings = parse_connection_string(CONN.replace("EntityPath=hub", f"EntityPath={hub}"))
        config, query, driver = ReceiverConfig(consumer_group=hub), new_query_key(), DriverAddress(("127.0.0.1",), 1)
        return [RangeRequest(config, str(p), 10 * p, 10 * p + 5, True, 30.0, settings=settings, query=query,
                             driver=driver, homes=True, range_id=p,
                             home=Home("e1", ("10.0.0.1",), 4000 + p) if p % 2 else None)
                for p in range(count)]  # fmt: skip

    ones, twos = batch("one", 6), batch("two", 6)
    assert ones[0].settings.hub == "one" and twos[0].settings.hub == "two"
    interleaved = [r for pair in zip(ones, twos, strict=True) for r in pair]
    for kept in (task_ranges._LOADED_KEPT, 1):  # a worker that keeps many shared parts, and one that keeps one
        task_ranges._loaded.clear()
        saved = task_ranges._LOADED_KEPT
        task_ranges._LOADED_KEPT = kept
        try:
            pickled = [pickle.dumps(r) for r in interleaved]
            back = [pickle.loads(b) for b in pickled]
        finally:
            task_ranges._LOADED_KEPT = saved
        assert back == interleaved
        assert [r.settings.hub for r in back] == ["one", "two"] * 6
    one_bytes = [pickle.dumps(r) for r in ones]
    shared = task_ranges._shared_bytes(tuple(getattr(ones[0], n) for n in task_ranges.SHARED_FIELDS))
    assert all(shared in b for b in one_bytes), "each carries the one pickled shared part"
    task_ranges._loaded.clear()
    back = [pickle.loads(b) for b in one_bytes]
    assert all(r.settings is back[0].settings and r.query is back[0].query for r in back), "unpickled once"
    assert len(pickle.dumps(ones[0])) < 2 * len(shared), "the range's own fields are all that is added"
