"""Between executors: the mutual handshake over the query's key, and sealed frames (socket pairs, nothing
running)."""

from __future__ import annotations

import socket
import threading

import pytest

from eventhubs_spark.auth.secret import Secret
from eventhubs_spark.interprocess import service_framing
from eventhubs_spark.interprocess.sealed_socket import RefusedError, SealedSocket, client_handshake, server_handshake
from eventhubs_spark.interprocess.task_ranges import QueryKey, new_query_key


def _pair(server_knows: QueryKey | None, client_has: QueryKey):
    a, b = socket.socketpair()
    out: dict[str, object] = {}

    def serve() -> None:
        try:
            out["server"] = server_handshake(
                b, lambda q: server_knows if server_knows and q == server_knows.query else None
            )
        except Exception as exc:
            out["server_error"] = exc

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        out["client"] = client_handshake(a, client_has)
    except Exception as exc:
        out["client_error"] = exc
        a.close()  # as a task does: it reads elsewhere
    thread.join(5)
    return out, a, b


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


@pytest.mark.parametrize("who", ["task", "service"])
def test_a_wrong_key_on_either_side_is_refused(who):
    right = new_query_key()
    wrong = QueryKey(right.query, Secret("not-the-key"))
    out, a, b = _pair(right if who == "task" else wrong, wrong if who == "task" else right)
    # the task checks the home's proof first: it finds the mismatch whichever side holds the wrong key, and the
    # home refuses a connection that leaves without its proof
    assert isinstance(out.get("client_error"), RefusedError) and isinstance(out.get("server_error"), RefusedError)
    assert "does not hold this query's key" in str(out["client_error"])
    assert "without proving it holds its key" in str(out["server_error"])
    a.close()
    b.close()


def test_a_query_the_home_does_not_know_is_refused_by_name():
    out, a, b = _pair(None, new_query_key())
    assert "does not know this query" in str(out["client_error"]) and "not known here" in str(out["server_error"])
    a.close()
    b.close()


def test_an_altered_frame_fails_its_check():
    query = new_query_key()
    out, a, b = _pair(query, query)
    client, (server, _) = out["client"], out["server"]
    sealed = SealedSocket.__new__(SealedSocket)
    sealed.__dict__.update(client.__dict__)  # type: ignore[union-attr]
    frame = client._aead.encrypt(client._nonce(b"C", 0), b"\x00" * 20, None)  # type: ignore[union-attr]
    a.sendall(len(frame).to_bytes(4, "big") + bytes([frame[0] ^ 1]) + frame[1:])
    with pytest.raises(ConnectionError, match="tampered"):
        service_framing.recv(server)
    a.close()
    b.close()


def test_a_caller_that_answers_without_the_key_is_refused_and_told():
    query = new_query_key()
    a, b = socket.socketpair()
    out: dict[str, object] = {}

    def serve() -> None:
        try:
            server_handshake(b, lambda q: query)
        except RefusedError as exc:
            out["error"] = exc

    thread = threading.Thread(target=serve)
    thread.start()
    a.sendall(b"EHS1" + bytes.fromhex(query.query) + b"\x01" * 32)
    assert a.recv(1) == b"K"
    a.recv(64)  # the home's challenge and proof
    a.sendall(b"\x00" * 32)  # a guess
    assert a.recv(1) == b"N"
    thread.join(5)
    assert "does not hold its key" in str(out["error"])
    a.close()
    b.close()
