"""Connections between a streaming query's processes over the network: proven and sealed.

Both sides prove they hold the query's key by an HMAC over the other's random challenge (the key never crosses the
wire), and everything after is sealed with AES-GCM under a key derived for the connection.

Why it is built so: the design notes in docs/pages/architecture.md.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import socket
import struct
from collections.abc import Callable, Sequence

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from eventhubs_spark.auth.secret import Secret
from eventhubs_spark.common import socket_waits
from eventhubs_spark.interprocess.task_ranges import QueryKey

MAGIC = b"EHS1"  # this protocol, version 1
NONCE_BYTES = 32
QUERY_ID_BYTES = 16
_MAC = hashlib.sha256().digest_size
_FRAME = struct.Struct(">I")  # a sealed frame's length
MAX_FRAME = 64 << 20  # bytes of one sealed frame: more than any chunk the service sends


class RefusedError(ConnectionError):
    """The other side does not hold the query's key, or the home does not know the query (yet)."""


def _mac(key: Secret, role: bytes, *parts: bytes) -> bytes:
    return hmac.new(key.reveal().encode("ascii"), role + b"".join(parts), hashlib.sha256).digest()


def _session(key: Secret, client_nonce: bytes, server_nonce: bytes) -> bytes:
    return HKDF(
        algorithm=hashes.SHA256(), length=32, salt=client_nonce + server_nonce, info=b"eventhubs-spark executor v1"
    ).derive(key.reveal().encode("ascii"))


class SealedSocket:
    """A connected socket whose bytes are sealed (AES-GCM) each way; offers what
    :mod:`eventhubs_spark.interprocess.service_framing` uses of a
    socket (``sendmsg``, ``recv_into``), so messages cross it exactly as they cross the Unix socket."""

    def __init__(self, sock: socket.socket, session_key: bytes, is_client: bool) -> None:
        self.sock = sock
        self._aead = AESGCM(session_key)
        self._send_tag, self._recv_tag = (b"C", b"S") if is_client else (b"S", b"C")
        self._sent = 0
        self._received = 0
        self._plain = memoryview(b"")
        self.max_frame = MAX_FRAME  # a side that takes only small messages lowers it (checked before allocating)

    def _nonce(self, tag: bytes, counter: int) -> bytes:
        return tag + b"\0\0\0" + counter.to_bytes(8, "big")

    def sendmsg(self, buffers: Sequence[memoryview | bytes]) -> int:
        plain = b"".join(buffers)
        sealed = self._aead.encrypt(self._nonce(self._send_tag, self._sent), plain, None)
        self._sent += 1
        self.sock.sendall(_FRAME.pack(len(sealed)) + sealed)
        return len(plain)

    def sendall(self, data: bytes) -> None:
        self.sendmsg([data])

    def _open_frame(self) -> bytes:
        (size,) = _FRAME.unpack(_recv_exactly(self.sock, _FRAME.size))
        if size > self.max_frame:
            raise ConnectionError(f"a sealed frame of {size} bytes, over the {self.max_frame} this side takes")
        sealed = _recv_exactly(self.sock, size)
        try:
            plain = self._aead.decrypt(self._nonce(self._recv_tag, self._received), sealed, None)
        except Exception as exc:  # cryptography's InvalidTag: altered, replayed or out of order
            raise ConnectionError("a sealed frame failed its check: the connection was tampered with") from exc
        self._received += 1
        return plain

    def recv_into(self, view: memoryview) -> int:
        if not self._plain:
            self._plain = memoryview(self._open_frame())
        n = min(len(view), len(self._plain))
        view[:n] = self._plain[:n]
        self._plain = self._plain[n:]
        return n

    def send_frame(self, data: bytes) -> None:
        """One message, sealed as one frame (what :meth:`recv_frame` gets whole)."""
        self.sendmsg([data])

    def recv_frame(self) -> bytes:
        """The next message sent with :meth:`send_frame` (nothing of it may have been read as bytes)."""
        if self._plain:
            raise ConnectionError("a message was read part-way as bytes")
        return self._open_frame()

    def settimeout(self, seconds: float | None) -> None:
        self.sock.settimeout(seconds)

    def ready(self) -> bool:
        """True when reading will not wait for the other side to send: bytes opened and not yet read, or the
        next frame's first bytes on the socket."""
        return bool(self._plain) or bool(socket_waits.readable([self.sock], 0))

    def close(self) -> None:
        self.sock.close()

    def getpeername(self) -> object:
        return self.sock.getpeername()


def client_handshake(sock: socket.socket, query: QueryKey) -> SealedSocket:
    """The task's side: name the query, check the home's proof, give ours; the sealed connection, or
    :class:`RefusedError`."""
    client_nonce = os.urandom(NONCE_BYTES)
    sock.sendall(MAGIC + bytes.fromhex(query.query) + client_nonce)
    answer = _recv_exactly(sock, 1)
    if answer != b"K":
        raise RefusedError("the home's receiver service does not know this query yet")
    server_nonce = _recv_exactly(sock, NONCE_BYTES)
    proof = _recv_exactly(sock, _MAC)
    if not hmac.compare_digest(proof, _mac(query.key, b"server", client_nonce, server_nonce)):
        raise RefusedError("the service at the home does not hold this query's key")
    sock.sendall(_mac(query.key, b"client", server_nonce, client_nonce))
    if _recv_exactly(sock, 1) != b"Y":
        raise RefusedError("the home's receiver service refused this task's key")
    return SealedSocket(sock, _session(query.key, client_nonce, server_nonce), is_client=True)


def server_handshake(sock: socket.socket, key_of: Callable[[str], QueryKey | None]) -> tuple[SealedSocket, str]:
    """The home's side: which query, whether we know its key, our proof, theirs; (sealed connection, query
    id), or :class:`RefusedError` (after telling the other side)."""
    head = _recv_exactly(sock, len(MAGIC) + QUERY_ID_BYTES + NONCE_BYTES)
    if head[: len(MAGIC)] != MAGIC:
        raise RefusedError("not this protocol")
    query_id = head[len(MAGIC) : len(MAGIC) + QUERY_ID_BYTES].hex()
    client_nonce = head[len(MAGIC) + QUERY_ID_BYTES :]
    query = key_of(query_id)
    if query is None:
        sock.sendall(b"U")
        raise RefusedError(f"query {query_id} is not known here")
    server_nonce = os.urandom(NONCE_BYTES)
    sock.sendall(b"K" + server_nonce + _mac(query.key, b"server", client_nonce, server_nonce))
    try:
        proof = _recv_exactly(sock, _MAC)
    except ConnectionError:  # it found our proof wrong (it holds another key) and went away
        raise RefusedError(f"a connection for query {query_id} left without proving it holds its key") from None
    if not hmac.compare_digest(proof, _mac(query.key, b"client", server_nonce, client_nonce)):
        sock.sendall(b"N")
        raise RefusedError(f"a connection for query {query_id} does not hold its key")
    sock.sendall(b"Y")
    return SealedSocket(sock, _session(query.key, client_nonce, server_nonce), is_client=False), query_id


def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    buf = bytearray()
    while len(buf) < size:
        chunk = sock.recv(size - len(buf))
        if not chunk:
            raise ConnectionResetError("the other side closed the connection")
        buf += chunk
    return bytes(buf)
