"""One receiver service per executor: receivers that outlive Spark's rotation of Python workers.

An executor hands its tasks to its Python workers in turn (the worker idle the longest goes next),
so a receiver kept in a worker is found again by that partition's next task only now and then, and
every miss costs a link attach and the events it had read ahead. Spark gives Python sources no say in
where tasks run (a Python partition has no preferred locations), so the partitions cannot be pinned
either; what the connector can do is keep the receivers where every worker of the executor reaches
them. The first worker that reads starts this service for its executor; every worker then reads its
ranges through it:

* **Where.** Workers of one executor share ``SPARK_LOCAL_DIRS`` (the executor's block manager
  directories). The first of them keys the service: a lock file there serializes the start, and the
  Unix socket lives in a private directory of the user's (``<tmp>/ehs-<uid>``, mode 0700, the socket
  0600, each peer's user checked), named after a hash of that directory (socket paths are limited to
  about 108 bytes, and YARN's directories are long).
* **What.** The service runs the same engine a worker would (one AMQP connection per namespace and
  credential, a receiver per partition, read-ahead between micro-batches, the pool's idle release),
  but its receivers keep each message undecoded (its sequence number read, nothing else): it sends
  each range as Arrow IPC record batches of (sequence number, message bytes), and the worker decodes
  them into the source's batches (:mod:`.layout`, column by column). Decoding this way it runs in
  every task slot of the executor rather than in the one service process. The range's counts follow; an error
  is raised in the task as the same type, with the same message.
* **When it cannot.** When the service cannot start or dies (even mid-range), the task reads
  in-process from the next event it has not yet handed to Spark, so nothing is lost or repeated;
  each worker logs that once.
* **How long.** The service exits when its executor's JVM has ended, when the executor's directory
  is gone, or after ``IDLE_EXIT`` seconds with no receiver and no request.

Placement: a balanced assignment of partitions to executors (hash of the hub, plus the partition
number, round the sorted executors) is what the connector would ask Spark for; Spark 4's Python
data sources cannot ask, so the connector keeps no such function and keeps receivers per executor.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import fcntl
import hashlib
import json
import logging
import os
import select
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any, TypeAlias

import numpy as np
import pyarrow as pa

from ..codec.layout import decode_spans
from . import protocol
from .receiver import RangeRequest, RangeResult, ReceiverPool, read_here

_LOG = logging.getLogger("eventhubs_spark")

IDLE_EXIT = 300.0  # seconds without receivers or requests before the service exits
_START_TIMEOUT = 15.0  # how long a worker waits for the service it started to listen
WIRE_VERSION = 2  # raised whenever a message below changes: old services and new workers never meet
_MESSAGE = struct.Struct(">cQ")  # kind, payload length
# next sequence number (8 bytes), message count n (8), each message's start and end (n + n int64, native order),
# then the buffer they are in: the frames as they arrived, undecoded (amqp.messages.RawEvents.spans)
_RAW = b"W"
_SPANS = struct.Struct("=qq")  # 16 bytes: the offsets that follow stay 8-byte aligned
# What the service may send ahead of a worker that is still decoding (or handing Spark) the last chunk, so
# the two processes work at once instead of taking turns. Measured (the kernel doubles it): Linux's default
# (208 KiB) holds about one chunk of small events; 512 KiB reads small events 20-25% faster; 2 MiB was as
# fast for small events but 30% slower for 2 KB ones, whose bytes then wait out of the CPU's cache.
_PIPE_BYTES = 512 << 10
_DONE = b"D"  # the range's counts (JSON)
_ERROR = b"E"  # the range's failure (JSON: type, message, example, retriable; see protocol.encode_error)
_READ = b"R"  # a RangeRequest (JSON, see protocol.decode_request): data only, never pickled


# -- where ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Place:
    """Where an executor's service lives."""

    local_dir: str  # the executor's first local directory (the key, and the lock file)
    socket_path: str

    @property
    def lock_path(self) -> str:
        return os.path.join(self.local_dir, "eventhubs-receiver-service.lock")

    @property
    def log_path(self) -> str:
        return os.path.join(self.local_dir, "eventhubs-receiver-service.log")


def place() -> Place | None:
    """This executor's service place, or None outside a Spark executor (no ``SPARK_LOCAL_DIRS``)."""
    dirs = os.environ.get("SPARK_LOCAL_DIRS", "")
    local_dir = dirs.split(",")[0].strip()
    if not local_dir or not os.path.isdir(local_dir):
        return None
    private = os.path.join(tempfile.gettempdir(), f"ehs-{os.getuid()}")
    os.makedirs(private, mode=0o700, exist_ok=True)
    info = os.stat(private)
    if info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise PermissionError(f"{private} must belong to this user alone (mode 0700)")
    # the wire format's version is part of the name: after an upgrade in a running executor (a notebook's
    # %pip install), new workers start a service of their own instead of talking to the old one
    key = f"{os.path.realpath(local_dir)}\0{WIRE_VERSION}"
    name = hashlib.sha256(key.encode()).hexdigest()[:20]
    return Place(local_dir, os.path.join(private, f"{name}.sock"))


def executor_pid() -> int | None:
    """The executor's JVM: the nearest ``java`` process above this worker (Linux ``/proc``), or None."""
    pid = os.getppid()
    for _ in range(8):
        try:
            with open(f"/proc/{pid}/comm") as f:
                name = f.read().strip()
            with open(f"/proc/{pid}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return None
        if name == "java":
            return pid
        if parent <= 1:
            return None
        pid = parent
    return None


# -- the wire ------------------------------------------------------------------------------------------


_IOV_MAX = 512  # pieces per sendmsg call, well under Linux's 1024


_Part: TypeAlias = "bytes | memoryview | pa.Buffer"
_Message: TypeAlias = "tuple[bytes, tuple[_Part, ...]]"  # kind, parts


def _send(sock: socket.socket, kind: bytes, *parts: _Part) -> None:
    _send_messages(sock, (kind, parts))


def _send_messages(sock: socket.socket, *messages: _Message) -> None:
    """Messages, each its header and parts, gathered into as few writes as the socket takes (one, for a
    request, a small chunk, or a range's last chunk with its end). A write per part would wake the reader
    once for each: on a busy executor each wake-up can hand the CPU to the other side before this side
    is done."""
    pending: list[memoryview] = []
    for kind, parts in messages:
        views = [memoryview(p).cast("B") for p in parts]
        pending.append(memoryview(_MESSAGE.pack(kind, sum(v.nbytes for v in views))))
        pending.extend(v for v in views if v.nbytes)
    while pending:
        sent = sock.sendmsg(pending[:_IOV_MAX])
        while sent:
            if sent >= pending[0].nbytes:
                sent -= pending.pop(0).nbytes
            else:
                pending[0], sent = pending[0][sent:], 0


def _recv_exactly(sock: socket.socket, size: int) -> bytearray:
    buf = bytearray(size)
    view = memoryview(buf)
    got = 0
    while got < size:
        n = sock.recv_into(view[got:])
        if not n:
            raise ConnectionResetError("the receiver service closed the connection")
        got += n
    return buf


def _recv(sock: socket.socket) -> tuple[bytes, bytearray]:
    kind, size = _MESSAGE.unpack(_recv_exactly(sock, _MESSAGE.size))
    return kind, _recv_exactly(sock, size)


# -- the service ---------------------------------------------------------------------------------------


class ReceiverService:
    """The executor's service: a Unix socket, a thread per worker connection, the process's pool."""

    def __init__(
        self, socket_path: str, local_dir: str | None, watch_pid: int | None, idle_exit: float, pool: ReceiverPool
    ) -> None:
        self.socket_path = socket_path
        self.pool = pool  # the service process's receivers (its runtime's)
        self.local_dir = local_dir
        self.watch_pid = watch_pid
        self.idle_exit = idle_exit
        self._active = 0
        self._lock = threading.Lock()
        self._last_activity = time.monotonic()
        self.requests = 0
        self.refused = 0  # connections closed for a message the protocol does not allow

    def run(self) -> str:
        """Serve until the executor is gone or nothing happened for ``idle_exit``; returns why it ended."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path)
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old_umask = os.umask(0o177)
        try:
            server.bind(self.socket_path)
        finally:
            os.umask(old_umask)
        os.chmod(self.socket_path, 0o600)
        server.listen(64)
        _LOG.info("receiver service %d listening on %s", os.getpid(), self.socket_path)
        try:
            while True:
                readable, _, _ = select.select([server], [], [], 1.0)
                if readable:
                    conn, _ = server.accept()
                    if not _same_user(conn):
                        _LOG.error("receiver service: refused a connection from another user's process")
                        self.refused += 1
                        conn.close()
                        continue
                    with contextlib.suppress(OSError):  # the kernel caps it (net.core.wmem_max); any size works
                        conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, _PIPE_BYTES)
                    threading.Thread(target=self._serve, args=(conn,), name="eventhubs-service", daemon=True).start()
                why = self._why_exit()
                if why is not None:
                    return why
        finally:
            server.close()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.socket_path)
            self.pool.close_all()

    def _why_exit(self) -> str | None:
        if self.watch_pid is not None and not _alive(self.watch_pid):
            return f"the executor (pid {self.watch_pid}) has ended"
        if self.local_dir is not None and not os.path.isdir(self.local_dir):
            return f"the executor's directory {self.local_dir} is gone"
        with self._lock:
            busy = self._active > 0 or len(self.pool) > 0
            if busy:
                self._last_activity = time.monotonic()
            elif time.monotonic() - self._last_activity > self.idle_exit:
                return f"idle for {self.idle_exit:g} s"
        return None

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            while True:
                try:
                    kind, payload = _recv(conn)
                except (ConnectionError, OSError):
                    return  # the worker went away (it exits when idle): nothing was in flight
                if kind != _READ:
                    _LOG.error("receiver service: refused a message of unknown kind %r from a worker; closing its "
                               "connection", kind)  # fmt: skip
                    self.refused += 1
                    return
                try:
                    request = protocol.decode_request(payload)
                except protocol.ProtocolError as exc:
                    _LOG.error("receiver service: refused a request that is not a valid range request (%s); "
                               "closing the worker's connection", exc)  # fmt: skip
                    self.refused += 1
                    return
                with self._lock:
                    self._active += 1
                    self.requests += 1
                try:
                    if not self._read(conn, request):
                        return
                finally:
                    with self._lock:
                        self._active -= 1
                        self._last_activity = time.monotonic()

    def _read(self, conn: socket.socket, request: RangeRequest) -> bool:
        """Send one range; False when the worker went away (the receiver is then dropped, not reused).

        Each chunk goes out as it is read, but the one that ends the range goes with the range's end in the
        same write: the worker then wakes once for a quiet stream's whole range."""
        result = RangeResult()
        chunks = read_here(request, result, self.pool)
        held: list[_Message] = []  # the range's last chunk, until the range's end goes with it
        try:
            for chunk in chunks:
                pieces, starts, ends = chunk.pieces()  # the worker decodes; the pieces are sent as they are
                after = chunk.seqs[-1] + 1  # the range goes on from here
                head = _SPANS.pack(after, len(starts))
                message = (_RAW, (head, starts.astype(np.int64).tobytes(), ends.astype(np.int64).tobytes(), *pieces))
                if after >= request.end:
                    held.append(message)
                else:
                    _send_to_worker(conn, *held, message)
                    held.clear()
            done = {**dataclasses.asdict(result), "pid": os.getpid(), **self.pool.stats_dict()}
            _send_to_worker(conn, *held, (_DONE, (json.dumps(done).encode(),)))
            return True
        except _WorkerGone:
            return False
        except Exception as exc:  # the range's own failure: raised again in the task, after what was read
            try:
                _send_to_worker(conn, *held)
            except _WorkerGone:
                return False
            return _send_error(conn, exc)
        finally:
            chunks.close()


class _WorkerGone(Exception):
    """The worker's end of the connection is gone (the task ended, or its worker did)."""


def _send_to_worker(conn: socket.socket, *messages: _Message) -> None:
    try:
        _send_messages(conn, *messages)
    except OSError as exc:
        raise _WorkerGone(str(exc)) from exc


def _send_error(conn: socket.socket, exc: BaseException) -> bool:
    try:
        _send(conn, _ERROR, protocol.encode_error(exc))
        return True
    except OSError:
        return False


def _same_user(conn: socket.socket) -> bool:
    """Only this user's processes may read through the service (the socket's mode says so too)."""
    try:
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except (OSError, AttributeError):
        return True  # no SO_PEERCRED here: the socket's mode 0600 and its private directory still hold
    _pid, uid, _gid = struct.unpack("3i", creds)
    return uid == os.getuid()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m eventhubs_spark.executor.service", description=__doc__)
    parser.add_argument("--socket", required=True)
    parser.add_argument("--local-dir")
    parser.add_argument("--watch-pid", type=int)
    parser.add_argument("--idle-exit", type=float, default=IDLE_EXIT)
    args = parser.parse_args(argv)
    logging.basicConfig(
        stream=sys.stderr,
        level=os.environ.get("EVENTHUBS_SPARK_LOG_LEVEL", "INFO").upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("azure").setLevel(logging.WARNING)  # the SDK logs every link state at INFO
    from .runtime import Runtime

    service = ReceiverService(args.socket, args.local_dir, args.watch_pid, args.idle_exit, Runtime().pool)
    why = service.run()
    _LOG.info("receiver service %d exits: %s (%d ranges served)", os.getpid(), why, service.requests)
    return 0


# -- the worker's side ---------------------------------------------------------------------------------


class ServiceGone(Exception):
    """The service went away before the range ended; ``next_seq`` is where the task reads on."""

    def __init__(self, next_seq: int, cause: str) -> None:
        super().__init__(cause)
        self.next_seq = next_seq


class ServiceClient:
    """A worker's connection to its executor's service (kept across tasks; made again when broken)."""

    def __init__(self, place: Place) -> None:
        self.place = place
        self._sock: socket.socket | None = None
        self.started_service = False

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
                    args = [sys.executable, "-m", "eventhubs_spark.executor.service", "--socket",
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

    def read(self, request: RangeRequest, stats: dict[str, Any]) -> Iterator[pa.RecordBatch]:
        """The range's record batches from the service; its counts land in ``stats``. Raises
        :class:`ServiceGone` when the service is unreachable or goes away, the task's errors as themselves."""
        next_seq = request.start
        decoded_here = 0  # events of raw batches the SDK's decoder made, here
        try:
            sock = self._connect()
            sock.settimeout(request.config.receiver_timeout + 60.0)
            _send(sock, _READ, protocol.encode_request(request))
            while True:
                kind, payload = _recv(sock)
                if kind == _RAW:
                    next_seq, n = _SPANS.unpack_from(payload)
                    starts = np.frombuffer(payload, np.int64, n, _SPANS.size)
                    ends = np.frombuffer(payload, np.int64, n, _SPANS.size + 8 * n)
                    buffer = pa.py_buffer(memoryview(payload)[_SPANS.size + 16 * n :])
                    batch, fallbacks = decode_spans(buffer, starts, ends, request.partition)
                    decoded_here += fallbacks
                    yield batch
                elif kind == _DONE:
                    stats.update(json.loads(payload))
                    stats["fallbacks"] = stats.get("fallbacks", 0) + decoded_here
                    return
                elif kind == _ERROR:
                    raise protocol.decode_error(payload)
                else:
                    raise OSError(f"unexpected message {kind!r} from the receiver service")
        except (OSError, EOFError, protocol.ProtocolError) as exc:
            self.close()
            raise ServiceGone(next_seq, f"{type(exc).__name__}: {exc}") from exc
        except GeneratorExit:
            self.close()  # the task stopped early: the service is mid-range on this connection
            raise

    def close(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.close()


def _try_connect(path: str) -> socket.socket | None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except OSError:
        sock.close()
        return None
    return sock


if __name__ == "__main__":
    sys.exit(main())
