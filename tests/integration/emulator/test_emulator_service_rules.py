"""Where the emulator must behave as the service does because a pooled connector depends on it
(issue 19): idle connections and links, a hub that does not exist, delivery annotations.

Each test is written from the SDK's observable behaviour and the service's documented rules: the
service advertises an idle time-out in its OPEN (120 s) and closes connections that send nothing,
force-detaches consumer links idle for 30 minutes, refuses a token for a missing entity with 404 at
put-token, and delivers the delivery annotations a message was sent with.
"""

from __future__ import annotations

import socket
import struct
import subprocess
import sys
import threading
import time

import pytest
from azure.eventhub import EventData, EventHubConsumerClient, EventHubProducerClient
from azure.eventhub.exceptions import AuthenticationError

from eventhubs_emulator import Emulator, amqp
from tests.integration.sdk_helpers import wait_until

IDLE = 1.0


@pytest.fixture(scope="module")
def emu():
    with Emulator({"idle": 2, "quiet": 1}, idle_timeout=IDLE, link_idle_timeout=IDLE) as emulator:
        yield emulator


class RawClient:
    """A bare AMQP client: the header and an OPEN, then whatever frames the server sends."""

    def __init__(self, port: int, idle_ms: int | None = None) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.buffer = b""
        self.sock.sendall(amqp.AMQP_HEADER)
        fields = ["raw-client", None, None, None, idle_ms, None, None, None, None, None]
        if idle_ms is not None:
            fields[4] = amqp.UInt(idle_ms)
        self.sock.sendall(amqp.encode_frame(0, amqp.encode_performative(amqp.OPEN, fields)))
        assert self._read(8) == amqp.AMQP_HEADER

    def _read(self, n: int) -> bytes:
        while len(self.buffer) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed")
            self.buffer += chunk
        out, self.buffer = self.buffer[:n], self.buffer[n:]
        return out

    def frame(self) -> tuple[int | None, list]:
        """(performative code, fields), or (None, []) for an empty frame (a heartbeat)."""
        size, doff, _type, _channel = struct.unpack(">IBBH", self._read(8))
        body = self._read(size - 8)[doff * 4 - 8 :]
        if not body:
            return None, []
        code, fields, _ = amqp.decode_performative(body)
        return code, fields

    def heartbeat(self) -> None:
        self.sock.sendall(struct.pack(">IBBH", 8, 2, 0, 0))


def test_open_advertises_the_idle_timeout_and_a_silent_connection_is_closed(emu):
    client = RawClient(emu.port)
    code, fields = client.frame()
    assert code == amqp.OPEN and fields[4] == int(IDLE * 1000)
    started = time.monotonic()
    code, fields = client.frame()  # nothing sent by the client: the server closes it
    assert code == amqp.CLOSE
    assert IDLE * 0.9 <= time.monotonic() - started <= IDLE + 2
    condition = fields[0].value[0] if hasattr(fields[0], "value") else fields[0][0]
    assert condition in (b"amqp:connection:forced", "amqp:connection:forced")


def test_heartbeats_keep_a_connection_whose_peer_asks_for_them(emu):
    client = RawClient(emu.port, idle_ms=400)
    assert client.frame()[0] == amqp.OPEN
    beats = 0
    deadline = time.monotonic() + 2.5
    client.sock.settimeout(0.5)
    while time.monotonic() < deadline:
        client.heartbeat()  # the client keeps its side alive, so only the server's beats are counted
        try:
            code, _ = client.frame()
        except TimeoutError:
            continue
        assert code is None, "nothing but heartbeats on an idle connection"
        beats += 1
    assert beats >= 4, f"a frame at least every 200 ms for a peer with a 400 ms idle time-out, got {beats}"


def test_an_idle_consumer_link_is_force_detached_and_the_sdk_recovers(emu):
    # From the start of an empty partition: a reader that has received nothing re-attaches at its
    # original position, and "@latest" would then skip what was sent while it was detached (SDK rule).
    conn = emu.connection_string("quiet")
    detached_before = emu.server.stats["idle_links_detached"]
    got: list[str] = []
    client = EventHubConsumerClient.from_connection_string(conn, consumer_group="$Default")
    thread = threading.Thread(
        target=client.receive,
        kwargs={"on_event": lambda ctx, e: got.append(e.body_as_str()), "partition_id": "0",
                "starting_position": "-1"},
        daemon=True,
    )  # fmt: skip
    thread.start()
    try:
        wait_until(lambda: emu.server.stats["idle_links_detached"] > detached_before, timeout=10,
                   message="the idle link detached")  # fmt: skip
        time.sleep(IDLE)
        with EventHubProducerClient.from_connection_string(conn) as producer:
            batch = producer.create_batch(partition_id="0")
            batch.add(EventData("after the detach"))
            producer.send_batch(batch)
        wait_until(lambda: got == ["after the detach"], timeout=20, message="the event after recovery")
    finally:
        client.close()
        thread.join(20)


def test_an_idle_producer_connection_is_closed_and_the_next_send_recovers(emu):
    conn = emu.connection_string("idle")
    closed_before = emu.server.stats["idle_connections_closed"]
    with EventHubProducerClient.from_connection_string(conn) as producer:
        for body in ("before", "after"):
            batch = producer.create_batch(partition_id="1")
            batch.add(EventData(body))
            producer.send_batch(batch)
            time.sleep(IDLE * 2.5)
    assert emu.server.stats["idle_connections_closed"] > closed_before
    assert emu.partition_properties("idle", 1)["last_enqueued_sequence_number"] >= 1


def test_a_missing_hub_is_refused_at_sign_in_as_the_service_does(emu):
    missing = emu.connection_string("idel")
    with EventHubProducerClient.from_connection_string(missing, retry_total=0) as producer:
        with pytest.raises(AuthenticationError, match="404") as info:
            producer.create_batch()  # the service answers the put-token: no batch for a missing hub
    assert "could not be found" in str(info.value) and "idel" in str(info.value)
    # the namespace as the client addressed it, with its port, as the service names its own
    assert f"'sb://{emu.fully_qualified_namespace}/idel'" in str(info.value)
    with EventHubConsumerClient.from_connection_string(missing, consumer_group="$Default", retry_total=0) as consumer:
        with pytest.raises(AuthenticationError, match="could not be found"):
            consumer.get_partition_ids()


def test_a_missing_consumer_group_is_named_not_taken_for_a_missing_hub(eventhub):
    """The service refuses the receiving link of a group the hub lacks: the task's error names the group, its
    option and how to create one (it was reported as a missing hub)."""
    from eventhubs_spark.auth.settings import parse_connection_string
    from eventhubs_spark.errors import ConsumerGroupNotFoundError
    from eventhubs_spark.executor.receiver_pool import ReceiverPool, read_here
    from eventhubs_spark.interprocess.task_ranges import RangeRequest, RangeResult, ReceiverConfig
    from eventhubs_spark.process.runtime import current

    settings = parse_connection_string(eventhub.connection_string)
    config = ReceiverConfig(consumer_group="nosuchgroup", receiver_timeout=10)
    request = RangeRequest(config, "0", 0, 1, True, settings=settings)
    pool = ReceiverPool(current().connections)
    with pytest.raises(ConsumerGroupNotFoundError) as info:
        list(read_here(request, RangeResult(), pool))
    text = str(info.value)
    assert text.startswith(f"consumer group 'nosuchgroup' was not found in event hub '{eventhub.name}'"), text
    assert "eventhubs.consumerGroup" in text and "consumer-group create" in text


def test_the_connector_and_the_cli_say_which_option_names_the_missing_hub(emu):
    from eventhubs_spark.errors import HubNotFoundError
    from eventhubs_spark.source import EventHubsBatchReader

    missing = emu.connection_string("idel")
    reader = EventHubsBatchReader({"eventhubs.connectionString": missing})
    with pytest.raises(HubNotFoundError) as info:
        reader.partitions()
    text = str(info.value)
    assert "'idel'" in text and emu.fully_qualified_namespace in text
    assert "eventhubs.name" in text and "EntityPath" in text and "SharedAccessKey=" not in text
    started = time.monotonic()
    run = subprocess.run(
        [sys.executable, "-m", "eventhubs_spark.cli", "send", "--connection-string", missing, "--count", "1"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert run.returncode == 2
    assert time.monotonic() - started < 10, "answered at once, not after the SDK's retries"
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: event hub 'idel' was not found"), run.stderr


def test_delivery_annotations_are_delivered_with_and_without_runtime_metrics(emu):
    conn = emu.connection_string("idle")
    with EventHubProducerClient.from_connection_string(conn) as producer:
        event = EventData("annotated")
        event.raw_amqp_message.delivery_annotations = {b"x-trace": b"abc", b"hop": 3}
        batch = producer.create_batch(partition_id="0")
        batch.add(event)
        producer.send_batch(batch)
    for metrics in (False, True):
        got: list = []
        seen = got.append
        client = EventHubConsumerClient.from_connection_string(conn, consumer_group="$Default")
        thread = threading.Thread(
            target=client.receive,
            kwargs={"on_event": lambda ctx, e, seen=seen: seen(e), "partition_id": "0", "starting_position": "-1",
                    "track_last_enqueued_event_properties": metrics},
            daemon=True,
        )  # fmt: skip
        thread.start()
        try:
            wait_until(lambda got=got: any(e.body_as_str() == "annotated" for e in got), timeout=20,
                       message="the event")  # fmt: skip
        finally:
            client.close()
            thread.join(20)
        annotated = next(e for e in got if e.body_as_str() == "annotated")
        annotations = annotated.raw_amqp_message.delivery_annotations
        assert annotations[b"x-trace"] == b"abc" and annotations[b"hop"] == 3
        assert (b"last_enqueued_sequence_number" in annotations) == metrics


@pytest.mark.parametrize("sign_in", ["key", "entra"])
def test_every_call_of_the_connector_fails_at_once_on_a_missing_hub(sign_in, monkeypatch):
    """The SDK retries a refused put-token (404 for a missing hub, 401 for a wrong key) three times, about
    13 s, before it raises, with keys and Entra tokens alike; the connector's calls (planning, receivers,
    position lookups, the sink) ask it for no retries and fail at once with HubNotFoundError."""
    from pyspark.sql.types import StringType, StructField, StructType

    from eventhubs_emulator.entra import LocalEntra
    from eventhubs_spark.amqp.management import ManagementClient
    from eventhubs_spark.errors import HubNotFoundError
    from eventhubs_spark.executor.receiver_pool import read_here
    from eventhubs_spark.interprocess.task_ranges import RangeRequest, RangeResult, ReceiverConfig
    from eventhubs_spark.options import read_options, write_options
    from eventhubs_spark.planning.position_lookup import first_event
    from eventhubs_spark.positions.event_positions import SequenceNumber
    from eventhubs_spark.process.runtime import current
    from eventhubs_spark.sink import layout_for, write_task

    with LocalEntra() as entra, Emulator({"t": 1}, token_verifier=entra.verify) as emulator:
        entra.add_secret_client("app", "app-secret")
        monkeypatch.setenv("REQUESTS_CA_BUNDLE", entra.ca_file)
        if sign_in == "key":
            options = {"eventhubs.connectionString": emulator.connection_string("nope")}
        else:
            options = {
                "eventhubs.namespace": emulator.fully_qualified_namespace, "eventhubs.name": "nope",
                "eventhubs.useDevelopmentEmulator": "true", "eventhubs.entra.tenantId": entra.tenant_id,
                "eventhubs.entra.clientId": "app", "eventhubs.entra.clientSecret": "app-secret",
                "eventhubs.entra.authorityHost": entra.authority, "eventhubs.entra.disableInstanceDiscovery": "true",
            }  # fmt: skip
        settings = read_options(options, "batch").settings
        config = ReceiverConfig(receiver_timeout=60)
        calls = {
            "planning": lambda: ManagementClient(settings, 60).partition_ids(),
            "receiver": lambda: list(read_here(RangeRequest(config, "0", 0, 1, True, settings=settings), RangeResult(),
                                               current().pool)),
            "position lookup": lambda: first_event(settings, config, "0", SequenceNumber(0), 60),
            "sink": lambda: write_task(write_options(options).settings, layout_for(StructType([StructField(
                "body", StringType())])), 60.0, iter([("x",)]), False),
        }  # fmt: skip
        for name, call in calls.items():
            started = time.monotonic()
            with pytest.raises(HubNotFoundError, match="'nope'"):
                call()
            assert time.monotonic() - started < 5, f"{name} waited for the SDK's retries"
