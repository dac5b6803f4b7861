"""Unit tests of :mod:`eventhubs_spark.interprocess.sealed_socket`."""

from __future__ import annotations

import socket
import threading

import pytest

from eventhubs_spark.auth.secret import Secret
from eventhubs_spark.interprocess import service_framing
from eventhubs_spark.interprocess.sealed_socket import RefusedError, SealedSocket, server_handshake
from eventhubs_spark.interprocess.task_ranges import QueryKey, new_query_key
from tests.unit.support.sealed import _pair


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
