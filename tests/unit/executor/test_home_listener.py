"""Unit tests of :mod:`eventhubs_spark.executor.home_listener`, over loopback sockets of the test's own."""

from __future__ import annotations

import dataclasses
import time

import pytest

from eventhubs_spark.executor.home_listener import Listener
from eventhubs_spark.interprocess import service_protocol
from eventhubs_spark.interprocess.home_link import connect_home
from eventhubs_spark.interprocess.sealed_socket import RefusedError
from eventhubs_spark.interprocess.service_framing import REMOTE_READ, send
from eventhubs_spark.interprocess.task_ranges import Home, RemoteRead, new_query_key
from tests.unit.support.service import request


def _wait(condition, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def test_a_home_serves_the_ranges_of_the_queries_its_tasks_brought_with_their_settings_and_refuses_strangers():
    served = []
    busy: list[int] = []
    listener = Listener("exec-1", serve=lambda sealed, req: served.append(req) or False, busy=busy.append)
    try:
        query = new_query_key()
        mine = dataclasses.replace(request(10, 20), query=query, homes=True, bind="127.0.0.1")
        assert listener.port is None, "no port before a streaming task comes"
        listener.register(mine)
        assert listener.port and listener.key_of(query.query) == query
        home = Home("exec-1", ("127.0.0.1",), listener.port)

        sealed = connect_home(home, query, timeout=5.0)
        asked = dataclasses.replace(mine, start=12, end=15, range_id=7)
        send(sealed, REMOTE_READ, service_protocol.encode_request(RemoteRead.of(asked)))
        _wait(lambda: served, "the home served the range")
        sealed.close()
        got = served[0]
        assert (got.partition, got.start, got.end) == ("3", 12, 15)
        assert got.settings == mine.settings, "read with the settings the query's own task brought, not sent ones"
        assert busy == [1, -1] and listener.served == 1

        with pytest.raises(RefusedError):
            connect_home(home, new_query_key(), timeout=5.0)  # a query this home was never told of
        _wait(lambda: listener.refused == 1, "the stranger counted as refused")
    finally:
        listener.close()
