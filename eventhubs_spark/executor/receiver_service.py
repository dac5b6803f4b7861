"""One receiver service per executor: receivers that outlive Spark's rotation of Python workers.

An executor hands its tasks to its Python workers in turn (the worker idle the longest goes next), so a receiver
kept in a worker is found again by that partition's next task only now and then, and every miss costs a link attach
and the events it had read ahead. So the receivers live where every worker of the executor reaches them: this
process, one per executor (where: :mod:`eventhubs_spark.executor.service_files`; started by the first worker that
reads: :mod:`eventhubs_spark.executor.service_client`), serving ranges over a Unix socket
(:mod:`eventhubs_spark.interprocess.service_framing`, requests checked by
:mod:`eventhubs_spark.interprocess.service_protocol`) (how: :class:`ReceiverService`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import socket
import struct
import sys
import threading
import time
import weakref
from collections.abc import Sequence

import numpy as np

from eventhubs_spark.amqp.receive_connections import Connections
from eventhubs_spark.common import socket_waits
from eventhubs_spark.executor.home_listener import Listener
from eventhubs_spark.executor.receiver_pool import ReceiverPool, read_here
from eventhubs_spark.executor.service_files import jvm_name
from eventhubs_spark.interprocess import driver_channel, service_protocol
from eventhubs_spark.interprocess.service_framing import (
    ALIVE,
    ALIVE_EVERY,
    DONE,
    ERROR,
    HELLO,
    MAX_REQUEST,
    RAW,
    READ,
    SPANS,
    Conn,
    Message,
    recv,
    send,
    send_messages,
)
from eventhubs_spark.interprocess.task_ranges import RangeRequest, RangeResult

_LOG = logging.getLogger(__name__)

IDLE_EXIT = 300.0  # seconds without receivers or requests before the service exits
# What the service may send ahead of a worker that is still decoding (or handing Spark) the last chunk, so
# the two processes work at once instead of taking turns. Measured (the kernel doubles it): Linux's default
# (208 KiB) holds about one chunk of small events; 512 KiB reads small events 20-25% faster; 2 MiB was as
# fast for small events but 30% slower for 2 KB ones, whose bytes then wait out of the CPU's cache.
_PIPE_BYTES = 512 << 10


class ReceiverService:
    """The executor's service: a Unix socket, a thread per worker connection, the process's pool.

    * **What.** The service runs the same engine a worker would (one AMQP connection per namespace and
      credential, a receiver per partition, read-ahead between micro-batches, the pool's idle release),
      but its receivers keep each message undecoded (its sequence number read, nothing else): it sends
      each range as spans of the undecoded AMQP frames, and the worker decodes them into the source's
      Arrow record batches (:mod:`eventhubs_spark.codec.layout`, column by column). Decoding this way
      runs in every task slot of the executor rather than in the one service process. The range's counts
      follow; an error is raised in the task as the same type, with the same message.
    * **Who.** Only this user's processes: the socket is 0600 in a 0700 directory, and each peer's user
      is checked (``SO_PEERCRED``).
    * **When it cannot.** When the service cannot start or dies (even mid-range), the task reads
      in-process from the next event it has not yet handed to Spark, so nothing is lost or repeated;
      each worker logs that once.
    * **How long.** The service exits when its executor's JVM has ended, when the executor's directory
      is gone, or after ``IDLE_EXIT`` seconds with no receiver and no request.
    """

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
        # each connection's sender, kept across its ranges (a connection is served by one thread at a time)
        self._senders: weakref.WeakKeyDictionary[Conn, _RangeSender] = weakref.WeakKeyDictionary()
        # the service's id (its place's name): how the driver and other executors name this home
        self.executor = os.path.basename(socket_path).removesuffix(".sock")
        self.listener = Listener(
            self.executor,
            self._read,
            self._busy,
            jvm=jvm_name(watch_pid),
            ends=pool.newest_ends,
            ends_version=lambda: pool.vouch_version,
        )

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
                readable = socket_waits.readable([server], 1.0)
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
                    self.listener.farewell(why)  # its queries' drivers stop placing partitions here at once
                    return why
        finally:
            server.close()
            self.listener.close()
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
                    kind, payload = recv(conn, MAX_REQUEST)
                except (ConnectionError, OSError):
                    return  # the worker went away (it exits when idle: nothing was in flight), or spoke nonsense
                if kind not in (READ, HELLO):
                    _LOG.error("receiver service: refused a message of unknown kind %r from a worker; closing its "
                               "connection", kind)  # fmt: skip
                    self.refused += 1
                    return
                try:
                    request: RangeRequest = service_protocol.decode_request(payload)
                except service_protocol.ProtocolError as exc:
                    _LOG.error("receiver service: refused a request that is not a valid range request (%s); "
                               "closing the worker's connection", exc)  # fmt: skip
                    self.refused += 1
                    return
                if request.query is not None and request.homes:
                    try:
                        self.listener.register(request)  # a stream's task: serve its query to other executors
                    except OSError as exc:
                        _LOG.warning("receiver service %s: cannot serve other executors: %s", self.executor, exc)
                if kind == HELLO:
                    reaches = request.driver is None or driver_channel.REACH.reachable(request.driver)
                    hello = {"executor": self.executor, "port": self.listener.port, "driver": reaches}
                    try:
                        send(conn, DONE, json.dumps(hello).encode())
                    except OSError:
                        return
                    continue
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

    def _busy(self, delta: int) -> None:
        """A remote connection's request comes in (+1) or ends (-1): the service is not idle meanwhile."""
        with self._lock:
            self._active += delta
            self.requests += max(delta, 0)
            self._last_activity = time.monotonic()

    def _read(self, conn: Conn, request: RangeRequest) -> bool:
        """Send one range; False when the worker went away (the receiver is then dropped, not reused).

        Each chunk goes out as it is read, but the one that ends the range goes with the range's end in the same
        write: the worker then wakes once for a quiet stream's whole range. Between chunks the service says it is
        still at the range (:data:`~eventhubs_spark.interprocess.service_framing.ALIVE`), so a worker knows a
        stopped service from a slow range."""
        result = RangeResult()
        chunks = read_here(request, result, self.pool)
        held: list[Message] = []  # the range's last chunk, until the range's end goes with it
        with self._lock:
            sender = self._senders.get(conn)
            if sender is None:
                sender = self._senders[conn] = _RangeSender(conn)
        sender.begin()
        try:
            for chunk in chunks:
                pieces, starts, ends = chunk.pieces()  # the worker decodes; the pieces are sent as they are
                after = chunk.seqs[-1] + 1  # the range goes on from here
                head = SPANS.pack(request.range_id, after, len(starts))
                message = (RAW, (head, starts.astype(np.int64).tobytes(), ends.astype(np.int64).tobytes(), *pieces))
                if after >= request.end:
                    held.append(message)
                else:
                    sender.send(*held, message)
                    held.clear()
            done = {**result.counts(), "pid": os.getpid(), **self.pool.stats_dict(),
                    "range": request.range_id}  # fmt: skip
            sender.send(*held, (DONE, (json.dumps(done).encode(),)))
            return True
        except _WorkerGone:
            return False
        except Exception as exc:  # the range's own failure: raised again in the task, after what was read
            try:
                sender.send(*held)
                sender.send((ERROR, (service_protocol.encode_error(exc),)))
            except _WorkerGone:
                return False
            return True
        finally:
            sender.stop()
            chunks.close()


class _WorkerGone(Exception):
    """The worker's end of the connection is gone (the task ended, or its worker did)."""


class _RangeSender:
    """A connection's range messages to its worker, and a thread that says
    :data:`~eventhubs_spark.interprocess.service_framing.ALIVE` whenever a range has sent nothing for
    :data:`~eventhubs_spark.interprocess.service_framing.ALIVE_EVERY` seconds (waiting on Event Hubs, a link
    re-attaching). Sends take turns under a lock: a sealed connection's frames must not interleave.

    One sender a connection, kept across its ranges (a worker's connection carries range after range): a thread
    started for every range made each range wait for the new thread to take the GIL from the service's busy
    ones, 1.4 ms of a 10-event range's 2 ms (issue 87). The thread ends once the connection has had no range for
    :data:`KEEP_THREAD` seconds, or once the connection is gone; the next range starts another. A blocked send
    blocks this connection only. The connection is held weakly: the service keeps its senders by connection
    (a weak mapping), and a sender that held its connection would keep every connection ever served."""

    KEEP_THREAD = 60.0

    def __init__(self, conn: Conn) -> None:
        self._conn = weakref.ref(conn)
        self._lock = threading.Lock()
        self._last = time.monotonic()
        self._active = False  # a range is being sent (keep-alives only then: between ranges the worker reads none)
        self._thread: threading.Thread | None = None

    def begin(self) -> None:
        """A range starts on the connection."""
        with self._lock:
            self._active = True
            self._last = time.monotonic()
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, name="eventhubs-alive", daemon=True)
                self._thread.start()

    def send(self, *messages: Message) -> None:
        with self._lock:
            try:
                send_messages(self._connection(), *messages)
            except OSError as exc:
                raise _WorkerGone(str(exc)) from exc
            finally:
                self._last = time.monotonic()

    def stop(self) -> None:
        """The range ended: no keep-alive after this (the next range's messages follow on the connection)."""
        with self._lock:
            self._active = False
            self._last = time.monotonic()

    def _watch(self) -> None:
        while True:
            time.sleep(ALIVE_EVERY / 2)
            with self._lock:
                if not self._active:
                    if time.monotonic() - self._last >= self.KEEP_THREAD or self._conn() is None:
                        self._thread = None
                        return
                    continue
            if not self._keep_alive():
                with self._lock:
                    self._thread = None
                return

    def _keep_alive(self) -> bool:
        """ALIVE, when a range is being sent and has sent nothing for ALIVE_EVERY; False once the connection broke
        (the range's own send finds it out and says so)."""
        with self._lock:
            if not self._active or time.monotonic() - self._last < ALIVE_EVERY:
                return True
            try:
                send(self._connection(), ALIVE)
            except OSError:
                return False
            self._last = time.monotonic()
        return True

    def _connection(self) -> Conn:
        conn = self._conn()
        if conn is None:  # its serving loop ended (a range in flight holds it)
            raise OSError("the worker's connection is closed")
        return conn


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
    parser = argparse.ArgumentParser(prog="python -m eventhubs_spark.executor.receiver_service", description=__doc__)
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
    # the same pool a worker's runtime keeps (idle receivers reaped every second), on the service's own connections
    pool = ReceiverPool(Connections(), reap_every=1.0)
    service = ReceiverService(args.socket, args.local_dir, args.watch_pid, args.idle_exit, pool)
    why = service.run()
    _LOG.info("receiver service %d exits: %s (%d ranges served)", os.getpid(), why, service.requests)
    return 0


if __name__ == "__main__":
    sys.exit(main())
