"""Planning's partition lookups at 1,024 partitions: concurrent, within a bounded window on the management link,
each partition asked exactly once per call, call after call on the kept connection, past the 10,000 answers the
SDK's response link is granted when it attaches."""

from __future__ import annotations

import threading

import pytest

from eventhubs_spark.amqp import management
from eventhubs_spark.amqp.management import ManagementClient
from eventhubs_spark.auth.settings import parse_connection_string


@pytest.mark.partitions(1024)
def test_1024_partitions_are_asked_concurrently_within_the_window_and_each_once(eventhub):
    client = ManagementClient(parse_connection_string(eventhub.connection_string), operation_timeout=120)
    ids = [str(p) for p in range(1024)]
    try:
        # the kept connection, reused: no call may repeat requests or slow down with reuse; eleven calls take 11,264
        # answers, past the 10,000 credit the SDK gives its response link once (the 10th call waited its attempt's
        # 30 s for an answer the emulator held without credit, reconnected, and asked again)
        for _ in range(11):
            before = eventhub.emulator.stats()["management_requests"]
            infos = client.partition_properties(ids)
            asked = eventhub.emulator.stats()["management_requests"] - before
            assert asked == 1024, f"{asked} requests reached the emulator for 1,024 partitions"
            assert sorted(infos, key=int) == ids and all(i.is_empty for i in infos.values())
        assert 1 < client.most_in_flight <= management._IN_FLIGHT, client.most_in_flight
        assert client.granted_credit is not None and client.granted_credit > 0, "the link's credit was read"
        assert client.credit_renewals >= 1, "the response link was given credit again"
    finally:
        client.close()


@pytest.mark.partitions(1024)
def test_a_listing_from_another_thread_beside_a_pipelined_lookup_gets_its_answer_and_the_lookup_its(eventhub):
    """A running stream lists the hub's partitions on a thread of its own while its planning thread may ask
    partitions' properties through the pipe (issue 64): each call gets its own answers, none is lost or crossed."""
    client = ManagementClient(parse_connection_string(eventhub.connection_string), operation_timeout=120)
    ids = [str(p) for p in range(1024)]
    listings: list[list[str]] = []
    errors: list[BaseException] = []

    def list_often() -> None:
        try:
            for _ in range(20):
                listings.append(client.partition_ids())
        except BaseException as exc:  # the assertion below names it
            errors.append(exc)

    try:
        client.partition_properties(ids[:1])  # the pipe is set up by a connection's first call
        before = eventhub.emulator.stats()["management_requests"]
        thread = threading.Thread(target=list_often)
        thread.start()
        for _ in range(4):
            infos = client.partition_properties(ids)
            assert sorted(infos, key=int) == ids
        thread.join(120)
        assert not errors, errors
        assert len(listings) == 20 and all(sorted(found, key=int) == ids for found in listings)
        # each request once: the two calls crossing on the connection lost answers, and made the requests again
        # after a reconnect (261 more than asked, in a run with 200 listings)
        asked = eventhub.emulator.stats()["management_requests"] - before
        assert asked == 4 * 1024 + 20, f"{asked} requests reached the emulator for {4 * 1024 + 20} asked"
    finally:
        client.close()
