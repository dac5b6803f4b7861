"""The driver channel: what a task must tell a stream's driver reaches the driver's log, from the query's
tasks only (HMAC over a challenge with the query's key), and never shows the key."""

from __future__ import annotations

import logging
import os
import pickle
import time

from pyspark import cloudpickle

from eventhubs_spark.channel import ChannelAddress, DriverChannel, new_key, send_notice
from eventhubs_spark.source import EventHubsStreamReader, read_partition

from .sdk_helpers import send


def wait_for(predicate, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False


def test_a_notice_with_the_querys_key_arrives_and_a_wrong_key_is_refused(caplog):
    heard: list[dict] = []
    channel = DriverChannel(heard.append, bind="127.0.0.1")
    try:
        address = channel.address()
        assert "127.0.0.1" in address.hosts and address.key.reveal() not in repr(address)
        assert send_notice(address, {"kind": "test", "n": 1})
        assert wait_for(lambda: heard == [{"kind": "test", "n": 1}])
        impostor = ChannelAddress(address.hosts, address.port, new_key())
        with caplog.at_level(logging.WARNING, logger="eventhubs_spark"):
            assert not send_notice(impostor, {"kind": "test", "n": 2})
            assert wait_for(lambda: channel.refused == 1)
        assert heard == [{"kind": "test", "n": 1}], "nothing of a refused connection is used"
        said = " ".join(r.getMessage() for r in caplog.records)
        assert "does not hold the query's key" in said
        assert address.key.reveal() not in said and impostor.key.reveal() not in said
    finally:
        channel.close()
    assert not send_notice(address, {"kind": "test"}), "a closed channel: the task goes on, nothing raised"


def test_a_worker_that_reads_for_itself_is_told_once_in_the_drivers_log(eventhub, tmp_path, monkeypatch, caplog):
    """A stream's planned partitions carry its driver channel; a task whose executor's receiver service cannot
    be used (here: the socket directory has the wrong mode) reads every event itself, and the driver's log
    says so once, naming the executor and why."""
    import tempfile

    from eventhubs_spark.executor import runtime

    send(eventhub.connection_string, [f"e{i}" for i in range(30)], partition_id="1")
    reader = EventHubsStreamReader(
        {"eventhubs.connectionString": eventhub.connection_string, "eventhubs.startingPosition": '{"offset": "-1"}'}
    )
    start = reader.initialOffset()
    end = reader.latestOffset(start, None) if reader.latestOffset.__code__.co_argcount > 1 else reader.latestOffset()
    planned = reader.partitions(start, end)
    key = reader.driver_channel().key.reveal()  # type: ignore[union-attr]
    assert planned and all(p.driver is not None and p.driver == planned[0].driver for p in planned)
    assert pickle.loads(cloudpickle.dumps(reader))._channel is None, "the listening socket stays in the runner"

    private = tmp_path / f"ehs-{os.getuid()}"
    private.mkdir(mode=0o755)
    os.chmod(private, 0o755)  # a socket directory others can read: the service is not used
    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(tmp_path))
    local = tmp_path / "blockmgr-d"
    local.mkdir()
    monkeypatch.setenv("SPARK_LOCAL_DIRS", str(local))
    previous = runtime.use(runtime.Runtime(reap_every=0))  # a new worker: it has not said it yet
    try:
        with caplog.at_level(logging.WARNING, logger="eventhubs_spark"):
            rows = [s for p in planned for b in read_partition(p) for s in b.column("sequenceNumber").to_pylist()]
            assert wait_for(lambda: any("reads for itself" in r.getMessage() for r in caplog.records))
            rows += [s for p in planned for b in read_partition(p) for s in b.column("sequenceNumber").to_pylist()]
            time.sleep(0.5)
    finally:
        runtime.use(previous)
        reader._channel.close()  # type: ignore[union-attr]
    assert sorted(rows) == sorted(list(range(30)) * 2), "every event read, by the worker itself"
    told = [r.getMessage() for r in caplog.records if "reads for itself" in r.getMessage()]
    assert len(told) == 1, told
    assert "mode 0700" in told[0] and f"hub {eventhub.name}" in told[0]
    assert key not in " ".join(r.getMessage() for r in caplog.records)
