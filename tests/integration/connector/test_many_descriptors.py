"""A process holding more than 1,024 descriptors (a worker that wrote to a 1,024-partition hub, a receiver
service with that many links) still waits on its sockets: the receive path, the receiver service and its
client, a home's sealed socket and the channel's connect all run here with every new socket numbered past
``select()``'s limit."""

from __future__ import annotations

import os
import resource
import socket
from collections.abc import Iterator

import pytest

from eventhubs_spark.auth.settings import parse_connection_string
from eventhubs_spark.interprocess import sockets
from eventhubs_spark.interprocess.task_ranges import Home, RangeRequest, ReceiverConfig, new_query_key
from tests.integration.sdk_helpers import send

_CROWD = 1_100


@pytest.fixture
def crowded() -> Iterator[int]:
    """Descriptors held open until there are more than ``_CROWD``; yields the first free number after them."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = _CROWD + 512
    if soft < wanted:
        if hard != resource.RLIM_INFINITY and hard < wanted:
            pytest.fail(f"this test needs {wanted} descriptors; the hard limit is {hard} (ulimit -Hn)")
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(_CROWD)]
    try:
        probe = os.open(os.devnull, os.O_RDONLY)
        os.close(probe)
        assert probe > 1024, f"the process's next descriptor is {probe}: the test would prove nothing"
        yield probe
    finally:
        for fd in held:
            os.close(fd)
        if soft < wanted:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_past_1024_descriptors_the_receive_path_the_service_a_home_and_the_channel_still_work(
    crowded,
    eventhub,
    home_service,
):
    service, worker = home_service
    send(eventhub.connection_string, [f"d{i}" for i in range(60)], partition_id="1")
    settings = parse_connection_string(eventhub.connection_string)
    query = new_query_key()
    config = ReceiverConfig(receiver_timeout=20, prefetch=7)  # several chunks: the tap waits on its socket often
    mine = RangeRequest(config, "1", 0, 30, True, query=query, homes=True, settings=settings)
    client = worker.service()
    assert client is not None
    answer = client.hello(mine)  # the worker's service client (wire) over a socket numbered past 1,024
    stats: dict = {}
    rows = [s for b in worker.read(mine, True, stats) for s in b.column("sequenceNumber").to_pylist()]
    assert rows == list(range(30)) and stats["via"] == "service"
    # another executor's task: the channel's connect and the sealed socket to the home, the home's receive path
    home = Home("another-executor", ("127.0.0.1",), int(answer["port"]))
    elsewhere = RangeRequest(config, "1", 30, 60, True, query=query, homes=True, home=home, settings=settings)
    stats = {}
    rows = [s for b in worker.read(elsewhere, True, stats) for s in b.column("sequenceNumber").to_pylist()]
    assert rows == list(range(30, 60)) and stats["via"] == "home:another-executor", stats
    assert service.listener.served >= 1
    # the channel's connect to a port nobody listens on and to one that listens: both answered, neither raises
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen(1)
        assert listening.fileno() > 1024
        assert sockets.reaches(("127.0.0.1",), listening.getsockname()[1], timeout=5)
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        closed_port = unused.getsockname()[1]
    assert not sockets.reaches(("127.0.0.1",), closed_port, timeout=2)
