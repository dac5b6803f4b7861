"""Reaching a namespace the way real networks allow, without Spark: the emulator's TLS and WebSocket
listeners with the official SDK and with Qpid Proton (an AMQP 1.0 implementation nobody here wrote),
the connector's receive path over each transport and through a real HTTP proxy, and the errors a
blocked port, an untrusted or wrong certificate and a refusing proxy give."""

from __future__ import annotations

import logging
import time
import uuid

import pytest

from eventhubs_emulator import Emulator, tls
from eventhubs_spark.amqp import receive_connections
from eventhubs_spark.amqp.management import ManagementClient
from eventhubs_spark.codec.layout import events_batch
from eventhubs_spark.errors import EventHubsTimeoutError, NetworkError
from eventhubs_spark.executor.receiver_pool import read_here
from eventhubs_spark.interprocess.task_ranges import RangeRequest, RangeResult, ReceiverConfig
from eventhubs_spark.options import read_options
from eventhubs_spark.process.runtime import current
from tests.conftest import free_port
from tests.integration.network_helpers import TRANSPORTS, network_options, sdk_kwargs
from tests.integration.sdk_helpers import receive, send


def read_rows(options: dict[str, str], partition: str, start: int, end: int, timeout: float = 20.0) -> list[dict]:
    """Read ``[start, end)`` of a partition through the connector's receive path, in this process."""
    settings = read_options(options, "batch").settings
    request = RangeRequest(ReceiverConfig(receiver_timeout=timeout), partition, start, end, True, settings=settings)
    rows: list[dict] = []
    for chunk in read_here(request, RangeResult(), current().pool):
        rows.extend(events_batch(chunk, partition)[0].to_pylist())
    return rows


def tap_of(options: dict[str, str]):
    """The frame tap of the shared connection these options read through (after a read)."""
    settings = read_options(options, "batch").settings
    connection = current().connections._by_key.get(receive_connections.Connections.key(settings))
    assert connection is not None and connection._tap is not None
    return connection._tap


# -- the official SDK over the emulator's TLS and WebSocket listeners ----------------------------------------


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_the_official_sdk_sends_receives_and_asks_properties_over_tls_and_websockets(eventhub, transport):
    from azure.eventhub import EventData, EventHubProducerClient

    kwargs = sdk_kwargs(eventhub, transport)
    with EventHubProducerClient.from_connection_string(eventhub.tls_connection_string, **kwargs) as producer:
        batch = producer.create_batch(partition_id="1")
        for i in range(50):
            batch.add(EventData(f"{transport}-{i}"))
        producer.send_batch(batch)
        assert producer.get_partition_properties("1")["last_enqueued_sequence_number"] == 49
    events = receive(
        eventhub.tls_connection_string, 50, partition_id="1", starting_position="-1", client_options=kwargs
    )
    assert [e.body_as_str() for e in events] == [f"{transport}-{i}" for i in range(50)]


# -- Qpid Proton: another AMQP 1.0 implementation -------------------------------------------------------------


def proton_connection(eventhub, secure: bool = False):
    from proton import SSLDomain
    from proton.utils import BlockingConnection

    if not secure:
        return BlockingConnection(f"amqp://127.0.0.1:{eventhub.emulator.port}", allowed_mechs="ANONYMOUS")
    domain = SSLDomain(SSLDomain.MODE_CLIENT)
    domain.set_trusted_ca_db(eventhub.ca_file)
    domain.set_peer_authentication(SSLDomain.VERIFY_PEER_NAME, eventhub.ca_file)
    port = eventhub.emulator.tls_port  # Proton checks the peer's name against DNS names only: localhost
    return BlockingConnection(f"amqps://localhost:{port}", ssl_domain=domain, allowed_mechs="ANONYMOUS")


@pytest.mark.parametrize("secure", [False, True], ids=["amqp", "amqps"])
def test_qpid_proton_sends_every_body_kind_and_the_sdk_and_the_connector_read_them(eventhub, secure):
    from proton import Message

    connection = proton_connection(eventhub, secure)
    try:
        sender = connection.create_sender(f"{eventhub.name}/Partitions/2")
        sender.send(Message(body=b"binary body", inferred=True, properties={"n": 7, "s": "text"}))  # data section
        sender.send(Message(body="a value body"))  # amqp-value section
        sender.send(Message(body=["a", "sequence"], inferred=True))  # amqp-sequence section
        sender.send(Message(body=b"x" * 300_000, inferred=True))  # several frames (the emulator's max is 64 KiB)
        sender.send(Message(body=b"keyed", annotations={"x-opt-partition-key": "device-1"}))  # binary amqp-value
    finally:
        connection.close()

    events = receive(eventhub.connection_string, 5, partition_id="2", starting_position="-1")
    assert b"".join(events[0].body) == b"binary body"
    assert events[0].properties == {b"n": 7, b"s": b"text"}
    assert events[1].body_type.value == "value" and events[1].body == b"a value body"  # the SDK gives str as bytes
    assert len(b"".join(events[3].body)) == 300_000

    rows = read_rows({"eventhubs.connectionString": eventhub.connection_string}, "2", 0, 5)
    assert [r["sequenceNumber"] for r in rows] == [0, 1, 2, 3, 4]
    assert rows[0]["body"] == b"binary body" and dict(rows[0]["properties"]) == {"n": "7", "s": "text"}
    assert rows[1]["body"] == b"a value body"
    assert rows[2]["body"] == b'[["a", "sequence"]]'  # a list of sequence sections, as the SDK has it
    assert rows[3]["body"] == b"x" * 300_000
    assert rows[4]["body"] == b"keyed" and rows[4]["partitionKey"] == "device-1"


@pytest.mark.parametrize("secure", [False, True], ids=["amqp", "amqps"])
def test_qpid_proton_receives_what_the_sdk_sent_with_the_service_annotations(eventhub, secure):
    send(eventhub.connection_string, [f"sdk-{i}" for i in range(20)], partition_id="0")
    connection = proton_connection(eventhub, secure)
    try:
        receiver = connection.create_receiver(f"{eventhub.name}/ConsumerGroups/$Default/Partitions/0")
        messages = [receiver.receive(timeout=10) for _ in range(20)]
    finally:
        connection.close()
    assert [bytes(m.body).decode() for m in messages] == [f"sdk-{i}" for i in range(20)]
    assert [m.annotations["x-opt-sequence-number"] for m in messages] == list(range(20))
    assert all(isinstance(m.annotations["x-opt-offset"], str) for m in messages)


# -- the connector's receive path over each transport -----------------------------------------------------------


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_the_connector_reads_over_tls_and_websockets_with_its_own_frame_reader(eventhub, transport):
    send(eventhub.connection_string, [f"e{i}" * 20 for i in range(3000)], partition_id="0")
    options = network_options(eventhub, transport)
    assert current().management(read_options(options, "batch").settings, 300).partition_ids() == ["0", "1", "2", "3"]
    rows = read_rows(options, "0", 0, 3000)
    assert [r["sequenceNumber"] for r in rows] == list(range(3000))
    assert rows[2999]["body"] == b"e2999" * 20
    tap = tap_of(options)
    assert tap.transport_name == ("tls" if transport == "tls" else "websocket")
    assert tap.transfers >= 3000 and not tap._by_frame  # read from the socket by the tap, not by the SDK


def test_a_websocket_ping_is_answered_and_the_read_goes_on(eventhub):
    options = network_options(eventhub, "websockets")
    send(eventhub.connection_string, ["before"], partition_id="3")
    assert [r["body"] for r in read_rows(options, "3", 0, 1)] == [b"before"]
    pongs = eventhub.emulator.websocket_pongs()
    assert eventhub.emulator.ping_websockets(b"are you there") >= 1
    send(eventhub.connection_string, ["after"], partition_id="3")
    assert [r["body"] for r in read_rows(options, "3", 1, 2)] == [b"after"]
    deadline = time.monotonic() + 10
    while eventhub.emulator.websocket_pongs() <= pongs and time.monotonic() < deadline:
        time.sleep(0.05)
    assert eventhub.emulator.websocket_pongs() > pongs


def test_a_transport_the_tap_cannot_read_directly_is_read_frame_by_frame_and_said_once(eventhub, monkeypatch, caplog):
    from eventhubs_spark.amqp import frame_reader as tap_module

    original = tap_module.FrameTap.__init__

    def unknown_transport(self, connection):  # as if the SDK's transport read from something not a socket
        original(self, connection)
        self.unsupported, self._by_frame = "SomeFutureTransport", True

    monkeypatch.setattr(tap_module.FrameTap, "__init__", unknown_transport)
    monkeypatch.setattr(receive_connections, "_SLOW_PATH_LOGGED", False)
    send(eventhub.connection_string, [f"f{i}" for i in range(500)], partition_id="1")
    options = {**network_options(eventhub, "websockets"), "eventhubs.prefetchCount": "97"}  # a connection of its own
    with caplog.at_level(logging.WARNING, logger="eventhubs_spark.amqp.receive_connections"):
        rows = read_rows(options, "1", 0, 500)
        rows += read_rows({**options, "eventhubs.consumerGroup": "other"}, "1", 0, 10)
    assert [r["body"] for r in rows] == [f"f{i}".encode() for i in range(500)] + [f"f{i}".encode() for i in range(10)]
    said = [r for r in caplog.records if "frame by frame" in r.getMessage()]
    assert len(said) == 1 and "SomeFutureTransport" in said[0].getMessage()
    assert tap_of(options).transfers >= 500  # still the tap's own transfer handling, fed frame by frame


# -- through a real HTTP proxy ----------------------------------------------------------------------------------


def test_websockets_through_a_proxy_with_and_without_credentials(eventhub, http_proxy, http_proxy_with_credentials):
    send(eventhub.connection_string, [f"p{i}" for i in range(200)], partition_id="2")
    ws_port = int(eventhub.websocket_endpoint.rsplit(":", 1)[-1])
    from eventhubs_spark.process.runtime import Runtime

    for proxy in (http_proxy, http_proxy_with_credentials):
        before = proxy.connects_to(ws_port)
        rt = Runtime(reap_every=0)  # connections of its own: none left open by an earlier test through this proxy
        options = network_options(eventhub, "websockets", proxy)
        settings = read_options(options, "batch").settings
        assert settings.network.websockets
        request = RangeRequest(ReceiverConfig(receiver_timeout=20), "2", 0, 200, True, settings=settings)
        bodies = [
            b for chunk in read_here(request, RangeResult(), rt.pool) for b in events_batch(chunk, "2")[0]["body"]
        ]
        assert [b.as_py() for b in bodies] == [f"p{i}".encode() for i in range(200)]
        info = rt.management(settings, 300).partition_properties(["2"])
        assert info["2"].last_enqueued_sequence_number == 199
        rt.pool.close_all()
        # both the receiver's connection and the management client's went through this proxy, with its credentials
        assert proxy.connects_to(ws_port) >= before + 2, proxy.connects
        if proxy.credentials:
            assert all(with_credentials for _, with_credentials in proxy.connects), proxy.connects


def test_the_checkpoint_store_goes_through_the_same_proxy(eventhub, azurite, http_proxy_with_credentials):
    from eventhubs_spark.checkpoints import Checkpoint
    from eventhubs_spark.checkpoints.mirror import CheckpointMirror
    from eventhubs_spark.options import read_options as parse

    container = f"proxy-{uuid.uuid4().hex[:8]}"
    store_options = {
        "eventhubs.checkpointStore.connectionString": azurite.connection_string,
        "eventhubs.checkpointStore.container": container,
    }
    good = parse({**network_options(eventhub, "websockets", http_proxy_with_credentials), **store_options}, "stream")
    store = CheckpointMirror(good.checkpoint_store, good.settings, ReceiverConfig()).store()
    store.update_checkpoint(Checkpoint("ns", "hub", "$default", "0", 41, "4100"))
    assert [c.sequence_number for c in store.list_checkpoints("ns", "hub", "$default")] == [41]

    refused = parse(
        {**network_options(eventhub, "websockets"), **http_proxy_with_credentials.options(with_credentials=False),
         **store_options}, "stream",
    )  # fmt: skip
    with pytest.raises(Exception, match="Proxy Authentication Required"):
        CheckpointMirror(refused.checkpoint_store, refused.settings, ReceiverConfig()).store()


# -- what a failure to get through says ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def stranger():
    """An emulator whose certificate names another host (other.example), not 127.0.0.1."""
    import tempfile

    where = tempfile.mkdtemp(prefix="stranger-tls-")
    certificate = tls.generate("127.0.0.1", where, names=["other.example"])
    with Emulator({"t": 1}, tls_port=0, certificate=certificate) as emu:
        yield emu


def failure(options: dict[str, str]) -> tuple[BaseException, float]:
    started = time.monotonic()
    with pytest.raises((NetworkError, EventHubsTimeoutError)) as caught:
        read_rows({**options, "eventhubs.receiverTimeout": "4s"}, "0", 0, 1, timeout=4)
    return caught.value, time.monotonic() - started


def test_an_untrusted_certificate_fails_at_once_naming_connection_verify(eventhub):
    options = {**network_options(eventhub, "tls"), "eventhubs.connectionVerify": "/etc/ssl/certs/ca-certificates.crt"}
    error, took = failure(options)
    assert isinstance(error, NetworkError) and took < 3
    assert "not trusted" in str(error) and "eventhubs.connectionVerify" in str(error)


def test_a_certificate_for_another_host_fails_at_once_naming_the_custom_endpoint(eventhub, stranger):
    options = {
        "eventhubs.connectionString": stranger.connection_string("t", tls=True),
        "eventhubs.customEndpointAddress": stranger.tls_endpoint,
        "eventhubs.connectionVerify": stranger.ca_file,
    }
    error, took = failure(options)
    assert isinstance(error, NetworkError) and took < 3
    assert "does not name that host" in str(error) and "eventhubs.customEndpointAddress" in str(error)


def test_a_closed_port_is_retried_to_the_receiver_timeout_and_names_websockets(eventhub):
    options = {**network_options(eventhub, "tls"), "eventhubs.customEndpointAddress": f"sb://127.0.0.1:{free_port()}"}
    error, took = failure(options)
    assert isinstance(error, NetworkError) and 3.5 < took < 15
    assert "refused the connection" in str(error) and "eventhubs.transportType=amqpWebSockets" in str(error)


def test_tls_spoken_to_a_plain_port_fails_at_once(eventhub):
    options = {**network_options(eventhub, "tls"), "eventhubs.customEndpointAddress": eventhub.emulator.endpoint}
    error, took = failure(options)
    assert isinstance(error, NetworkError) and took < 3 and "TLS handshake" in str(error)


def test_a_proxy_that_wants_credentials_fails_at_once_naming_them(eventhub, http_proxy_with_credentials):
    options = {**network_options(eventhub, "websockets"), **http_proxy_with_credentials.options(False)}
    error, took = failure(options)
    assert isinstance(error, NetworkError) and took < 3
    assert "407" in str(error) and "eventhubs.httpProxy.username" in str(error)
    settings = read_options(options, "batch").settings
    with pytest.raises(NetworkError, match="eventhubs.httpProxy.password"):
        ManagementClient(settings, operation_timeout=5).partition_ids()
    # a wrong password is sent (the proxy still answers 407) and never shown, by either client
    wrong = {**options, "eventhubs.httpProxy.username": "spark", "eventhubs.httpProxy.password": "wrong-pass-31"}
    error, _ = failure(wrong)
    assert "407" in str(error) and "wrong-pass-31" not in str(error) and "wrong-pass-31" not in repr(error)
    with pytest.raises(NetworkError, match="407") as managed:
        ManagementClient(read_options(wrong, "batch").settings, operation_timeout=5).partition_ids()
    assert "wrong-pass-31" not in str(managed.value)
    assert http_proxy_with_credentials.connects[-1][1], "the request carried the (wrong) credentials"


def test_a_proxy_that_is_not_there_is_named(eventhub):
    options = {
        **network_options(eventhub, "websockets"),
        "eventhubs.httpProxy.hostname": "127.0.0.1",
        "eventhubs.httpProxy.port": str(free_port()),
    }
    settings = read_options(options, "batch").settings
    with pytest.raises(EventHubsTimeoutError, match="cannot reach the HTTP proxy") as caught:
        ManagementClient(settings, operation_timeout=3).partition_ids()
    assert "eventhubs.httpProxy.hostname" in str(caught.value)


def test_the_sink_fails_on_an_untrusted_certificate_without_waiting_for_the_operation_timeout(eventhub):
    from pyspark.sql.types import StringType, StructField, StructType

    from eventhubs_spark.options import write_options
    from eventhubs_spark.sink import layout_for, write_task

    options = {**network_options(eventhub, "tls"), "eventhubs.connectionVerify": "/etc/ssl/certs/ca-certificates.crt"}
    layout = layout_for(StructType([StructField("body", StringType())]))
    started = time.monotonic()
    with pytest.raises(NetworkError, match="eventhubs.connectionVerify"):
        write_task(write_options(options).settings, layout, 120.0, iter([("hello",)]), arrow=False)
    assert time.monotonic() - started < 40  # the SDK's own three retries, not ours until eventhubs.operationTimeout


def test_the_executors_receiver_service_reads_through_a_proxy_with_credentials(
    eventhub, http_proxy_with_credentials, tmp_path, monkeypatch
):
    """The settings (transport, proxy and its password, endpoint, CA bundle) cross to the service process,
    which reads over WebSockets through the proxy."""
    import os
    import shutil

    from eventhubs_spark.process.runtime import Runtime

    local = tmp_path / "blockmgr-net"
    local.mkdir()
    monkeypatch.setenv("SPARK_LOCAL_DIRS", str(local))
    rt = Runtime(reap_every=0)  # a worker's, with this executor's service
    send(eventhub.connection_string, [f"s{i}" for i in range(300)], partition_id="0")
    settings = read_options(network_options(eventhub, "websockets", http_proxy_with_credentials), "stream").settings
    request = RangeRequest(ReceiverConfig(receiver_timeout=20), "0", 0, 300, True, settings=settings)
    stats: dict = {}
    try:
        batches = list(rt.read(request, True, stats))
        assert stats["via"] == "service" and stats["pid"] != os.getpid(), stats
        bodies = [b for batch in batches for b in batch.column("body").to_pylist()]
        assert bodies == [f"s{i}".encode() for i in range(300)]
    finally:
        client = rt.service()
        if client is not None:
            client.close()
        shutil.rmtree(local)  # the service exits when its executor's directory is gone


def test_bytes_tls_decrypted_but_not_yet_read_never_stall_a_read(eventhub, monkeypatch):
    """With reads smaller than a TLS record, the rest of the record waits inside the TLS layer, where the
    socket's readiness does not show it: the tap must look there first, or each such read would wait for
    its time-out (0.2 s) while the data sits ready."""
    from eventhubs_spark.amqp import frame_reader as tap_module

    monkeypatch.setattr(tap_module, "_CHUNK", 512)  # far below a TLS record (16 KiB)
    send(eventhub.connection_string, [f"r{i}" * 50 for i in range(2000)], partition_id="3")
    options = {**network_options(eventhub, "tls"), "eventhubs.prefetchCount": "101"}  # a connection of its own
    started = time.monotonic()
    rows = read_rows(options, "3", 0, 2000)
    took = time.monotonic() - started
    assert [r["sequenceNumber"] for r in rows] == list(range(2000))
    assert took < 8, f"{took:.1f} s: reads waited on the socket while TLS held the bytes"


def test_entra_sign_in_goes_through_the_same_proxy_and_trusts_the_same_ca(http_proxy_with_credentials, monkeypatch):
    """Where traffic must take a proxy, so must the token request: a service principal signs in through
    eventhubs.httpProxy.* and trusts eventhubs.connectionVerify, as the hub's connection does (before, only
    the process's HTTPS_PROXY and REQUESTS_CA_BUNDLE, which a user behind a proxy may not be able to set)."""
    from eventhubs_emulator.entra import EVENTHUBS_AUDIENCE, LocalEntra
    from eventhubs_spark.auth.credentials import EntraSettings
    from eventhubs_spark.auth.network import WEBSOCKETS, HttpProxy, NetworkSettings
    from eventhubs_spark.auth.secret import Secret

    for variable in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "REQUESTS_CA_BUNDLE", "NO_PROXY"):
        monkeypatch.delenv(variable, raising=False)
    scope = f"{EVENTHUBS_AUDIENCE}/.default"
    with LocalEntra() as entra:
        entra.add_secret_client("app-behind-proxy", "secret-TOPSECRET-9")

        identity = EntraSettings(
            method="servicePrincipal", tenant_id=entra.tenant_id, client_id="app-behind-proxy",
            client_secret=Secret("secret-TOPSECRET-9"), authority_host=entra.authority,
            disable_instance_discovery=True,
        )  # fmt: skip

        user, _, password = (http_proxy_with_credentials.credentials or "").partition(":")
        proxy = HttpProxy("127.0.0.1", http_proxy_with_credentials.port, user, Secret(password))
        through = NetworkSettings(transport=WEBSOCKETS, proxy=proxy, ca_file=entra.ca_file)
        token = identity.credential(through).get_token(scope)  # a credential (and token cache) per network
        assert entra.verify(token.token) is None
        # the token request went to the proxy: one that is not there fails the sign-in, naming the refusal
        gone = HttpProxy("127.0.0.1", free_port())
        nowhere = NetworkSettings(transport=WEBSOCKETS, proxy=gone, ca_file=entra.ca_file)
        with pytest.raises(Exception) as failed:
            identity.credential(nowhere).get_token(scope)
        assert "proxy" in str(failed.value).lower() or "refused" in str(failed.value).lower()
        # and it trusted eventhubs.connectionVerify: without it the token service's certificate is a stranger
        untrusted = NetworkSettings(transport=WEBSOCKETS, proxy=proxy)
        with pytest.raises(Exception) as refused:
            identity.credential(untrusted).get_token(scope)
        assert "certificate" in str(refused.value).lower()
        assert "secret-TOPSECRET-9" not in str(failed.value) + str(refused.value)
        assert password not in str(failed.value) + str(refused.value)
