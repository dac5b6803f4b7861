"""Unit tests of :mod:`eventhubs_spark.interprocess.service_framing`."""

from __future__ import annotations

import os
import socket
import threading

from eventhubs_spark.executor import receiver_service, service_client
from eventhubs_spark.interprocess import service_framing
from eventhubs_spark.interprocess.sealed_socket import SealedSocket, client_handshake, server_handshake
from eventhubs_spark.interprocess.task_ranges import new_query_key
from eventhubs_spark.process import runtime
from tests.unit.support.sealed import _pair
from tests.unit.support.service import request, scripted


def test_both_sides_prove_the_key_and_messages_cross_sealed():
    query = new_query_key()
    out, a, b = _pair(query, query)
    client, (server, query_id) = out["client"], out["server"]
    assert isinstance(client, SealedSocket) and query_id == query.query
    big = bytes(range(256)) * 5000
    service_framing.send_messages(client, (service_framing.READ, (b"request",)))
    assert service_framing.recv(server) == (service_framing.READ, bytearray(b"request"))
    sender = threading.Thread(
        target=service_framing.send_messages,
        args=(server, (service_framing.RAW, (b"head", memoryview(big))), (service_framing.DONE, (b"{}",))),
    )
    sender.start()  # more than a socket pair holds: read while it is sent
    assert service_framing.recv(client) == (service_framing.RAW, bytearray(b"head" + big))
    assert service_framing.recv(client) == (service_framing.DONE, bytearray(b"{}"))
    sender.join(5)
    a.close()
    b.close()


def test_what_crosses_is_not_readable_and_the_key_never_crosses():
    query = new_query_key()
    a, b = socket.socketpair()
    tap, far = socket.socketpair()  # everything the client sends, seen on the way
    seen = bytearray()

    def relay(src: socket.socket, dst: socket.socket, record: bool) -> None:
        while data := src.recv(65536):
            if record:
                seen.extend(data)
            dst.sendall(data)
        dst.shutdown(socket.SHUT_WR)

    threading.Thread(target=relay, args=(far, b, True), daemon=True).start()
    threading.Thread(target=relay, args=(b, far, False), daemon=True).start()
    result: dict[str, object] = {}
    thread = threading.Thread(target=lambda: result.update(s=server_handshake(a, lambda q: query)))
    thread.start()
    client = client_handshake(tap, query)
    thread.join(5)
    server, _ = result["s"]  # type: ignore[misc]
    service_framing.send(client, service_framing.READ, b"partition 7 of hub telemetry")
    assert service_framing.recv(server)[1] == bytearray(b"partition 7 of hub telemetry")
    assert b"telemetry" not in seen and query.key.reveal().encode() not in seen


def test_each_chunk_goes_as_it_is_read_and_the_last_with_the_ranges_end_in_one_write(running, monkeypatch):
    worker = running[2]
    read_here, _ = scripted()
    monkeypatch.setattr(receiver_service, "read_here", read_here)
    writes: list[list[bytes]] = []
    send = service_framing.send_messages

    def recording(sock: object, *messages: tuple[bytes, tuple[bytes, ...]]) -> None:
        writes.append([kind for kind, _ in messages])
        send(sock, *messages)  # type: ignore[arg-type]

    monkeypatch.setattr(receiver_service, "send_messages", recording)
    batches = list(worker.read(request(100, 135), True, {}))
    assert sum(b.num_rows for b in batches) == 35
    service_writes = [w for w in writes if w != [service_framing.READ]]  # the worker's request goes the same way
    assert service_writes == [[service_framing.RAW]] * 3 + [[service_framing.RAW, service_framing.DONE]]


def test_a_service_lost_while_chunks_are_gathered_loses_none_of_them(running, monkeypatch):
    """The connection breaks after a chunk was received and before it was handed to Spark (while the worker
    gathered the next): the task reads on by itself from that chunk's first event, not from after it."""
    _where, _svc, worker = running
    read_here, _ = scripted()
    monkeypatch.setattr(receiver_service, "read_here", read_here)
    monkeypatch.setattr(service_client, "ready", lambda sock: True)
    real_recv = service_client.recv
    raws = []

    def breaking(sock: object, *args: object) -> tuple[bytes, bytearray]:
        kind, payload = real_recv(sock, *args)  # type: ignore[arg-type]
        if kind == service_framing.RAW:
            raws.append(kind)
            if len(raws) == 2:
                raise ConnectionResetError("the service went away")
        return kind, payload

    monkeypatch.setattr(service_client, "recv", breaking)
    read_here_again, starts_again = scripted()
    monkeypatch.setattr(runtime, "read_here", read_here_again)
    got = [s for b in worker.read(request(100, 150), True, {}) for s in b.column("sequenceNumber").to_pylist()]
    assert got == list(range(100, 150)), "nothing lost, nothing twice"
    assert starts_again == [100], "read on from the first event not yet handed to Spark"


def test_a_message_crosses_whole_in_one_write_when_small_and_in_pieces_when_the_socket_is_full():
    import socket

    import pyarrow as pa

    a, b = socket.socketpair()
    writes: list[int] = []

    class Counting:
        def sendmsg(self, buffers: list[memoryview]) -> int:
            writes.append(len(buffers))
            return a.sendmsg(buffers)

    try:
        service_framing.send(Counting(), b"R", b"head", memoryview(b"-mid-"), b"", pa.py_buffer(b"tail"))  # type: ignore[arg-type]
        assert writes == [4]  # header and three parts (the empty one left out): one write, one wake-up
        assert service_framing.recv(b) == (b"R", bytearray(b"head-mid-tail"))
        a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)  # a chunk larger than the socket holds
        a.settimeout(10)  # as the service's and the tasks' sockets: a write takes what fits and returns
        big = [os.urandom(300_000), pa.py_buffer(os.urandom(700_001)), os.urandom(3)]
        got: list[tuple[bytes, bytearray]] = []
        reader = threading.Thread(target=lambda: got.append(service_framing.recv(b)))
        reader.start()
        service_framing.send(Counting(), b"W", *big)  # type: ignore[arg-type]
        reader.join(10)
        assert got == [(b"W", bytearray(big[0] + big[1].to_pybytes() + big[2]))]
        assert len(writes) > 2  # partial writes resumed where each stopped
    finally:
        a.close()
        b.close()
