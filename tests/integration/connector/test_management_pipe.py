"""Partition properties through the management pipe (the connector's own request and answer frames on the SDK's
kept connection): the same answers as the SDK's own path over TCP, TLS and WebSockets, and what the service may do
to a request (answer it with an error, refuse it at the link, leave it unanswered, send its answer unsettled)
ends in the right answers, each partition asked once more at most."""

from __future__ import annotations

import time

import pytest

from eventhubs_spark.amqp.management import ManagementClient
from eventhubs_spark.amqp.management_pipe import ManagementPipe
from eventhubs_spark.auth.settings import parse_connection_string
from eventhubs_spark.options import read_options
from tests.integration.network_helpers import TRANSPORTS, network_options
from tests.integration.sdk_helpers import send

PARTITIONS = 150


def _client(eventhub, transport: str = "tcp", pipelined: bool = True) -> ManagementClient:
    if transport == "tcp":
        settings = parse_connection_string(eventhub.connection_string)
    else:
        settings = read_options(network_options(eventhub, transport), "batch").settings
    client = ManagementClient(settings, operation_timeout=120)
    client.pipelined = pipelined
    return client


def _ids() -> list[str]:
    return [str(p) for p in range(PARTITIONS)]


@pytest.mark.partitions(PARTITIONS)
@pytest.mark.parametrize("transport", ["tcp", *TRANSPORTS])
def test_the_pipe_answers_as_the_sdk_does_over_every_transport(eventhub, transport):
    for pid, count in (("0", 3), ("77", 1), ("149", 2)):
        send(eventhub.connection_string, [f"e{i}" for i in range(count)], partition_id=pid)
    piped, through_sdk = _client(eventhub, transport), _client(eventhub, transport, pipelined=False)
    try:
        for _ in range(3):  # call after call on the kept connection
            before = eventhub.emulator.stats()["management_requests"]
            got = piped.partition_properties(_ids())
            assert eventhub.emulator.stats()["management_requests"] - before == PARTITIONS, "each partition once"
            assert got == through_sdk.partition_properties(_ids())
        assert isinstance(piped._pipe, ManagementPipe), f"the pipe ran over {transport}"
        assert piped._pipe.written == 3 * PARTITIONS - 1, "all but the connection's first request went through it"
        assert 1 < piped.most_in_flight <= piped._window()
        assert got["77"].last_enqueued_sequence_number == 0 and got["149"].last_enqueued_sequence_number == 1
        assert got["0"].last_enqueued_sequence_number == 2 and got["1"].is_empty
    finally:
        piped.close()
        through_sdk.close()


@pytest.mark.partitions(PARTITIONS)
def test_error_answers_refusals_and_lost_requests_end_in_the_right_answers(eventhub):
    client = _client(eventhub)
    try:
        expected = client.partition_properties(_ids())  # the pipe is open from here on
        assert isinstance(client._pipe, ManagementPipe)
        for fault in (
            lambda: eventhub.emulator.fail_management_calls(5),  # answered 503: asked again
            lambda: eventhub.emulator.reject_management_calls(1),  # refused at the link: reconnect, ask again
        ):
            fault()
            assert client.partition_properties(_ids()) == expected
        eventhub.emulator.fail_management_calls(0)
        eventhub.emulator.reject_management_calls(0)
    finally:
        client.close()


@pytest.mark.partitions(PARTITIONS)
def test_a_lost_request_is_asked_again_on_a_new_connection_after_the_attempts_bound(eventhub):
    options = {"eventhubs.connectionString": eventhub.connection_string, "eventhubs.connectionIdleTimeout": "3s"}
    client = ManagementClient(read_options(options, "batch").settings, operation_timeout=60)
    try:
        expected = client.partition_properties(_ids())
        eventhub.emulator.ignore_management_calls(1)
        assert client.partition_properties(_ids()) == expected
        assert isinstance(client._pipe, ManagementPipe), "the new connection's pipe"
    finally:
        eventhub.emulator.ignore_management_calls(0)
        client.close()


@pytest.mark.partitions(PARTITIONS)
def test_answers_sent_unsettled_are_settled_by_the_pipe_in_ranges(eventhub):
    client = _client(eventhub)
    try:
        expected = client.partition_properties(_ids())
        eventhub.emulator.unsettled_management_answers(True)
        before = eventhub.emulator.stats()["answers_settled_by_client"]
        for _ in range(2):
            assert client.partition_properties(_ids()) == expected
        settled = 0
        deadline = time.monotonic() + 10
        while settled < 2 * PARTITIONS and time.monotonic() < deadline:  # the last settlement is on its way
            settled = eventhub.emulator.stats()["answers_settled_by_client"] - before
            time.sleep(0.05)
        assert settled == 2 * PARTITIONS
    finally:
        eventhub.emulator.unsettled_management_answers(False)
        client.close()


@pytest.mark.partitions(PARTITIONS)
def test_each_call_through_the_pipe_lets_the_sdk_renew_the_connections_sign_in(eventhub):
    """The SDK renews a connection's token before each of its own requests (client_ready_async); the pipe's
    requests bypass it, so each call asks for that once."""
    client = _client(eventhub)
    try:
        client.partition_properties(_ids())
        assert isinstance(client._pipe, ManagementPipe)
        mgmt = client._mgmt
        ready, checks = mgmt.client_ready_async, []

        async def counted():
            checks.append(1)
            return await ready()

        mgmt.client_ready_async = counted
        client.partition_properties(_ids())
        assert len(checks) >= 1, "the sign-in was not checked (nor renewed) before the pipe's requests"
    finally:
        client.close()
