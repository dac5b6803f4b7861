"""A worker's side of its executor's receiver service: start it when it is not there, read through it.

The first worker that reads starts the service for its executor (under the lock file of its
:class:`~eventhubs_spark.executor.service_files.Place`, so only one does), detached from the worker, as ``python -m
eventhubs_spark.executor.receiver_service``; every worker then reads its ranges through it. When the service
cannot start or goes away mid-range, :class:`ServiceGone` says from which sequence number the task
reads on by itself.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from eventhubs_spark.codec.layout import decode_spans
from eventhubs_spark.executor.service_files import Place, executor_pid
from eventhubs_spark.interprocess import service_protocol
from eventhubs_spark.interprocess.home_link import connect_home
from eventhubs_spark.interprocess.sealed_socket import RefusedError, SealedSocket
from eventhubs_spark.interprocess.service_framing import (
    ALIVE,
    DONE,
    ERROR,
    HELLO,
    RAW,
    READ,
    REMOTE_READ,
    SILENT_LIMIT,
    SPANS,
    Conn,
    ready,
    recv,
    send,
)
from eventhubs_spark.interprocess.sockets import PROBE_TIMEOUT
from eventhubs_spark.interprocess.task_ranges import Home, QueryKey, RangeRequest, RemoteRead

_START_TIMEOUT = 15.0  # how long a worker waits for the service it started to listen


class ServiceGone(Exception):
    """The service went away before the range ended; ``next_seq`` is where the task reads on."""

    def __init__(self, next_seq: int, cause: str) -> None:
        super().__init__(cause)
        self.next_seq = next_seq


class ServiceClient:
    """A worker's connection to its executor's service (kept across tasks; made again when broken)."""

    def __init__(self, place: Place) -> None:
        self.place = place
        self.executor = os.path.basename(place.socket_path).removesuffix(".sock")  # the service's id
        self._sock: socket.socket | None = None
        self.started_service = False

    def connect(self) -> socket.socket:
        """The connection to the service, starting it first when it is not there (OSError when it cannot)."""
        return self._connect()

    def _connect(self) -> socket.socket:
        if self._sock is not None:
            return self._sock
        sock = _try_connect(self.place.socket_path)
        if sock is None:
            sock = self._start()
        self._sock = sock
        return sock

    def _start(self) -> socket.socket:
        """Start the executor's service (one worker does, under the lock file) and connect to it."""
        with open(self.place.lock_path, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                sock = _try_connect(self.place.socket_path)  # another worker may have started it meanwhile
                if sock is not None:
                    return sock
                with open(self.place.log_path, "ab") as log:
                    args = [sys.executable, "-m", "eventhubs_spark.executor.receiver_service", "--socket",
                            self.place.socket_path, "--local-dir", self.place.local_dir]  # fmt: skip
                    pid = executor_pid()
                    if pid is not None:
                        args += ["--watch-pid", str(pid)]
                    process = subprocess.Popen(
                        args, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True, close_fds=True
                    )
                self.started_service = True
                deadline = time.monotonic() + _START_TIMEOUT
                while time.monotonic() < deadline:
                    sock = _try_connect(self.place.socket_path)
                    if sock is not None:
                        return sock
                    if process.poll() is not None:
                        raise OSError(f"the receiver service exited at start (code {process.returncode}); see "
                                      f"{self.place.log_path}")  # fmt: skip
                    time.sleep(0.05)
                process.kill()
                raise OSError(f"the receiver service did not listen within {_START_TIMEOUT:g} s")
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def read(
        self, request: RangeRequest, stats: dict[str, Any], needed: frozenset[int] | None = None
    ) -> Iterator[pa.RecordBatch]:
        """The range's record batches from the service; its counts land in ``stats`` (``needed``: the columns the
        task uses, see :func:`~eventhubs_spark.codec.layout.decode_spans`). Raises :class:`ServiceGone` when the
        service is unreachable or goes away, the task's errors as themselves."""
        try:
            sock = self._connect()
        except OSError as exc:
            raise ServiceGone(request.start, f"{type(exc).__name__}: {exc}") from exc
        request = dataclasses.replace(request, range_id=_range_id())
        yield from _range(sock, READ, service_protocol.encode_request(request), request, stats, self.close, needed)

    def hello(self, request: RangeRequest) -> dict[str, Any]:
        """Register a stream's query with the service (it then serves it to other executors and the driver
        knows it); the service's id and port. OSError when it cannot be reached."""
        try:
            sock = self._connect()
            sock.settimeout(30.0)
            send(sock, HELLO, service_protocol.encode_request(request))
            kind, payload = recv(sock)
        except OSError:
            self.close()
            raise
        if kind != DONE:
            self.close()
            raise OSError(f"unexpected answer {kind!r} to a hello from the receiver service")
        answer = json.loads(payload)
        return answer if isinstance(answer, dict) else {}

    def close(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.close()


def _range_id() -> int:
    """A fresh name for one request: a chunk that carries another (a stale one) is refused."""
    return int.from_bytes(os.urandom(8), "big") >> 1


def _try_connect(path: str) -> socket.socket | None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except OSError:
        sock.close()
        return None
    return sock


def _range(
    sock: Conn,
    kind: bytes,
    asked: bytes,
    request: RangeRequest,
    stats: dict[str, Any],
    close: Callable[[], None],
    needed: frozenset[int] | None = None,
) -> Iterator[pa.RecordBatch]:
    """Ask for a range on ``sock`` (a worker's Unix socket, or a sealed connection to the home) and yield its
    record batches, decoded here; its counts land in ``stats``. :class:`ServiceGone` when the other side goes
    away, with where the task reads on; ``close`` drops the connection then (and when the task stops early)."""
    next_seq = request.start  # the first event not yet handed to Spark: where the task reads on without the service
    decoded_here = 0  # events of raw batches the SDK's decoder made, here
    waiting: tuple[bytes, bytearray] | None = None  # a message read while chunks were gathered
    try:
        sock.settimeout(SILENT_LIMIT)  # a service at the range says so every ALIVE_EVERY seconds
        send(sock, kind, asked)
        while True:
            kind, payload = waiting if waiting is not None else recv(sock)
            waiting = None
            if kind == ALIVE:
                continue
            if kind == RAW:
                # The chunks already here are decoded as one: a chunk's decoding costs about half a millisecond
                # whatever its size, and Spark pays per record batch too.
                after, chunks = _chunk(payload, request, next_seq), [payload]
                events, size = _events(payload), len(payload)
                while events < MERGE_EVENTS and size < MERGE_BYTES and after < request.end and ready(sock):
                    kind, payload = recv(sock)
                    if kind == ALIVE:
                        continue
                    if kind != RAW:
                        waiting = kind, payload
                        break
                    after = _chunk(payload, request, after)
                    chunks.append(payload)
                    events += _events(payload)
                    size += len(payload)
                buffer, starts, ends = _spans(chunks)
                batch, fallbacks = decode_spans(buffer, starts, ends, request.partition, needed=needed)
                decoded_here += fallbacks
                yield batch
                next_seq = after
            elif kind == DONE:
                done = json.loads(payload)
                if done.pop("range", None) != request.range_id:
                    raise service_protocol.ProtocolError(f"the end of another range where this task asked for range id "
                                                 f"{request.range_id}")  # fmt: skip
                stats.update(done)
                stats["fallbacks"] = stats.get("fallbacks", 0) + decoded_here
                return
            elif kind == ERROR:
                raise service_protocol.decode_error(payload)
            else:
                raise OSError(f"unexpected message {kind!r} from the receiver service")
    except TimeoutError as exc:
        close()
        raise ServiceGone(next_seq, f"it said nothing for {SILENT_LIMIT:g} s (stopped, or a firewall drops what "
                          "it sends)") from exc  # fmt: skip
    except (OSError, EOFError, service_protocol.ProtocolError) as exc:
        close()
        raise ServiceGone(next_seq, f"{type(exc).__name__}: {exc}") from exc
    except GeneratorExit:
        close()  # the task stopped early: the service is mid-range on this connection
        raise


# Chunks already received are decoded together up to this many events or bytes (see _range): the bytes bound keeps
# large events (up to 1 MB each) from piling up in a worker while the service keeps sending.
MERGE_EVENTS = 4096
MERGE_BYTES = 4 << 20


def _chunk(payload: bytearray, request: RangeRequest, next_seq: int) -> int:
    """A RAW message's checks (the task's range; it goes on from ``next_seq``): where the range goes on after it."""
    range_id, after, _n = SPANS.unpack_from(payload)
    if range_id != request.range_id or not next_seq < after <= request.end:
        raise service_protocol.ProtocolError(
            f"a chunk of another range (range id {range_id}, up to {after}) where this task asked for "
            f"[{next_seq}, {request.end}) of partition {request.partition} (range id {request.range_id})"
        )
    return int(after)


def _events(payload: bytearray) -> int:
    return int(SPANS.unpack_from(payload)[2])


def _spans(chunks: list[bytearray]) -> tuple[pa.Buffer, np.ndarray, np.ndarray]:
    """The messages of RAW payloads as one buffer with each message's start and end in it (one payload: its own
    bytes, nothing copied)."""
    buffers, starts, ends = [], [], []
    offset = 0
    for payload in chunks:
        n = _events(payload)
        data = memoryview(payload)[SPANS.size + 16 * n :]
        starts.append(np.frombuffer(payload, np.int64, n, SPANS.size) + offset)
        ends.append(np.frombuffer(payload, np.int64, n, SPANS.size + 8 * n) + offset)
        buffers.append(data)
        offset += len(data)
    if len(chunks) == 1:
        return pa.py_buffer(buffers[0]), starts[0], ends[0]
    return pa.py_buffer(b"".join(buffers)), np.concatenate(starts), np.concatenate(ends)


class HomeClient:
    """A worker's connection to another executor's receiver service, a partition's home, for one query
    (kept across tasks; made again when broken)."""

    def __init__(self, home: Home, query: QueryKey, connect_timeout: float = PROBE_TIMEOUT) -> None:
        self.home = home
        self.query = query
        self.connect_timeout = connect_timeout
        self._conn: SealedSocket | None = None

    def _connect(self) -> SealedSocket:
        if self._conn is None:
            self._conn = connect_home(self.home, self.query, self.connect_timeout)
        return self._conn

    def read(
        self, request: RangeRequest, stats: dict[str, Any], needed: frozenset[int] | None = None
    ) -> Iterator[pa.RecordBatch]:
        """The range from the home, as :meth:`ServiceClient.read`; :class:`RefusedError` (the home does not
        know the query, or a key mismatch) or :class:`ServiceGone` when it cannot be had there."""
        try:
            conn = self._connect()
        except RefusedError:
            raise
        except OSError as exc:
            raise ServiceGone(request.start, str(exc)) from exc
        request = dataclasses.replace(request, range_id=_range_id())
        asked = service_protocol.encode_request(RemoteRead.of(request))
        yield from _range(conn, REMOTE_READ, asked, request, stats, self.close, needed)

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(OSError):
                conn.close()
