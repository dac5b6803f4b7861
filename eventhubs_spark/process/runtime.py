"""What one Spark process keeps across tasks and micro-batches, in one place, built once and lazily.

A Python worker (and the driver's stream runner, and the executor's receiver service) keeps: the AMQP
connections its receivers share (one per namespace and credential), the pool of partition receivers,
the sink's producers, the kept-open management clients, and its connection to the executor's receiver
service. They were five module globals; here they are one :class:`Runtime`, with its clock and its
pool settings passed in, which :func:`current` builds on first use. Tests build a runtime of their own
(with their clock) and pass it, or install it with :func:`use`, instead of patching globals.
"""

from __future__ import annotations

import dataclasses
import gc
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from eventhubs_spark.auth.settings import ConnectionSettings
from eventhubs_spark.codec.layout import events_batch
from eventhubs_spark.errors import OptionError
from eventhubs_spark.executor.service_client import HomeClient, ServiceClient, ServiceGone
from eventhubs_spark.executor.service_files import executor_pid, jvm_name, place
from eventhubs_spark.interprocess import driver_channel, sockets
from eventhubs_spark.interprocess.sealed_socket import RefusedError
from eventhubs_spark.interprocess.task_ranges import Home, RangeRequest, RangeResult

if TYPE_CHECKING:  # imported where first used: a task that reads through the receiver service uses none of them
    from eventhubs_spark.amqp.management import ManagementClient
    from eventhubs_spark.amqp.receive_connections import Connections
    from eventhubs_spark.executor.receiver_pool import ReceiverPool
    from eventhubs_spark.executor.shared_producer import SharedProducer

_LOG = logging.getLogger(__name__)
RANGE_READERS = 8  # ranges of one packed task read at once, ahead of the one handed to Spark
_ASK_HOME_TIMEOUT = 15.0  # a first batch's task waits this long at most for the driver to name its home


def read_here(request: RangeRequest, result: RangeResult, pool: ReceiverPool) -> Iterator[Any]:
    """:func:`eventhubs_spark.executor.receiver_pool.read_here`, imported when a worker first reads itself."""
    from eventhubs_spark.executor.receiver_pool import read_here as read

    return read(request, result, pool)


class ProducerPool:
    """One :class:`SharedProducer` per (namespace, hub, credentials, network) per process, reused across tasks."""

    def __init__(self, lanes: int | None = None) -> None:
        self._clients: dict[tuple[Any, ...], SharedProducer] = {}
        self._lock = threading.Lock()
        self.lanes = lanes  # None: SharedProducer's LANES

    def get(self, settings: ConnectionSettings) -> SharedProducer:
        from eventhubs_spark.executor.shared_producer import LANES, SharedProducer

        key = settings.pool_key()
        with self._lock:
            client = self._clients.get(key)
            if client is None:
                client = SharedProducer(settings, self.lanes or LANES, self._lookup(settings))
                self._clients[key] = client
            return client

    @staticmethod
    def _lookup(settings: ConnectionSettings) -> Callable[[float], list[str]]:
        """The hub's partition ids over the process's kept management client (see :meth:`Runtime.management`)."""
        return lambda timeout: current().management(settings, timeout).partition_ids()

    def invalidate(self, settings: ConnectionSettings) -> None:
        with self._lock:
            client = self._clients.pop(settings.pool_key(), None)
        if client is not None:
            client.close()


class Runtime:
    """One process's connections, receivers, producers, management clients and receiver-service client."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        reap_every: float = 1.0,
        pool_capacity: int | None = None,
        place_of_service: Callable[[], Any] = place,
    ) -> None:
        """``reap_every``: seconds between closes of idle receivers by a daemon thread (0: only when asked);
        ``pool_capacity``: receivers the process keeps (None: the pool's CAPACITY); ``place_of_service``: where
        this executor's receiver service lives (None outside an executor)."""
        self.clock = clock
        self._reap_every = reap_every
        self._pool_capacity = pool_capacity
        self._connections: Connections | None = None  # made on first use (connections, pool)
        self._pool: ReceiverPool | None = None
        self.producers = ProducerPool()
        self._place = place_of_service
        self._where: Any = None  # the executor's service's place, looked up once
        self._service_looked_up = False
        # A connection is read by one thread at a time: each thread that reads ranges (the task's, and a packed
        # task's range readers) keeps its own to the service and to each home
        self._local = threading.local()
        self._management: dict[tuple[Any, ...], ManagementClient] = {}
        self._lock = threading.Lock()
        self._fallback_logged = False
        self._readers: Any = None  # the range readers' threads (range_readers), made on first use
        # What this process found it may not use, each found out once (at a bounded cost) and checked again in the
        # background every sockets.RECHECK seconds, so no task pays a failed probe its process has paid already:
        self._unreachable: set[tuple[str, str]] = set()  # (query, home executor): that home cannot be reached
        self._said: set[tuple[str, str]] = set()  # (query, home executor): said once, here and to the driver
        self._service_down = False  # the executor's receiver service cannot start, or went away
        self._announced: set[str] = set()  # queries this process's service was told of (hello), by key
        self.recheck = sockets.RECHECK

    @property
    def connections(self) -> Connections:
        """The process's receiving connections, one per namespace (made on first use: a worker whose tasks read
        through the receiver service never receives itself, nor imports the SDK's receiving side)."""
        with self._lock:
            if self._connections is None:
                from eventhubs_spark.amqp.receive_connections import Connections

                self._connections = Connections()
            return self._connections

    @property
    def pool(self) -> ReceiverPool:
        """The process's receivers (made on first use, see :attr:`connections`)."""
        connections = self.connections
        with self._lock:
            if self._pool is None:
                from eventhubs_spark.executor.receiver_pool import CAPACITY, ReceiverPool

                capacity = self._pool_capacity if self._pool_capacity is not None else CAPACITY
                self._pool = ReceiverPool(connections, capacity=capacity, clock=self.clock,
                                          reap_every=self._reap_every)  # fmt: skip
            return self._pool

    def management(self, settings: ConnectionSettings, operation_timeout: float) -> ManagementClient:
        """The process's kept-open management client for these settings (created on first use)."""
        from eventhubs_spark.amqp.management import ManagementClient

        key = settings.pool_key()
        with self._lock:
            client = self._management.get(key)
            if client is None:
                client = self._management[key] = ManagementClient(settings, operation_timeout)
            client.operation_timeout = operation_timeout
            return client

    def service(self) -> ServiceClient | None:
        """This worker's connection to its executor's receiver service; None outside an executor, and while the
        service is known to be unusable here (it could not start, or went away: see :meth:`_service_failed`)."""
        with self._lock:
            if not self._service_looked_up:
                self._where = self._place()
                self._service_looked_up = True
            if self._service_down or self._where is None:
                return None
        client: ServiceClient | None = getattr(self._local, "service", None)
        if client is None:
            client = self._local.service = ServiceClient(self._where)
        return client

    def range_readers(self) -> Any:
        """The threads a task of several ranges reads them on, ahead of the one it hands Spark (each with its own
        connections, kept across tasks): made once per process."""
        from concurrent.futures import ThreadPoolExecutor

        with self._lock:
            if self._readers is None:
                self._readers = ThreadPoolExecutor(RANGE_READERS, thread_name_prefix="eventhubs-range")
            return self._readers

    def _service_failed(self) -> None:
        """The service could not be used: tasks here read in their worker from now on, at no cost, while a thread
        tries to reach (or start) the service again: at once (a service killed between tasks is back within a
        second or two), then every ``recheck`` seconds (one a sandbox forbids costs one attempt a minute, in the
        background)."""
        client: ServiceClient | None = getattr(self._local, "service", None)
        with self._lock:
            if client is None or self._service_down:
                return
            self._service_down = True
        client.close()
        self._local.service = None  # whichever thread reads next makes a new one once the service is back

        def recheck() -> None:
            wait = 0.0
            while True:
                time.sleep(wait)
                wait = self.recheck
                probe = ServiceClient(client.place)
                try:
                    probe.connect()
                except OSError:
                    continue
                finally:
                    probe.close()
                with self._lock:
                    self._service_down = False
                _LOG.info("eventhubs: the executor's receiver service is up again: tasks here read through it")
                return

        threading.Thread(target=recheck, name="eventhubs-service-recheck", daemon=True).start()

    def read(
        self, request: RangeRequest, use_service: bool, stats: dict[str, Any], needed: frozenset[int] | None = None
    ) -> Iterator[pa.RecordBatch]:
        """One range as record batches: from the partition's home when that is another executor's receiver
        service (a stream's, :mod:`eventhubs_spark.executor.home_listener`), else through this executor's service,
        else (or from wherever the service or home stopped) in this process. ``stats`` gets the counts to log;
        ``needed``: the columns the task uses (the others may be null, see codec.layout.decode_spans)."""
        start = request.start
        if use_service:
            try:
                client = self.service()
                if client is not None:
                    home = self._home_of(request, client)
                    if home is not None and self._home_down(request, home):
                        # its home cannot be reached from here (found out before): read in this worker, keeping
                        # no link or read-ahead, so the partition stays the home's
                        request = dataclasses.replace(request, idle_timeout=0.0)
                        stats["home_down"] = home.executor
                    elif home is not None and home.executor != client.executor:
                        try:
                            stats["via"] = f"home:{home.executor}"
                            yield from self._home_client(home, request).read(request, stats, needed)
                            return
                        except (ServiceGone, RefusedError) as exc:
                            start = exc.next_seq if isinstance(exc, ServiceGone) else request.start
                            # remembered when it could not be reached; a home that does not know the query yet (a
                            # first batch, its service not yet told) is tried again by the next task
                            self._home_unreachable(request, home, exc, remember=isinstance(exc, ServiceGone))
                            # the rest here, keeping no link or read-ahead: the partition stays the home's
                            request = dataclasses.replace(request, idle_timeout=0.0)
                    else:
                        stats["via"] = "service"
                        yield from client.read(request, stats, needed)
                        return
            except ServiceGone as exc:
                start = exc.next_seq
                self._fallback(f"the executor's receiver service is unavailable ({exc}); reading in this worker",
                               request)  # fmt: skip
                self._service_failed()
            except OSError as exc:
                self._fallback(f"the executor's receiver service cannot start ({exc}); reading in this worker",
                               request)  # fmt: skip
                self._service_failed()
        stats["via"] = "worker"
        result = RangeResult()
        here = dataclasses.replace(request, start=start) if start != request.start else request
        for chunk in read_here(here, result, self.pool):
            batch, fallbacks = events_batch(chunk, request.partition, needed)
            result.fallbacks += fallbacks
            yield batch
        stats.update(result.counts())
        stats.update(self.pool.stats_dict())
        stats["pid"] = os.getpid()

    def _home_of(self, request: RangeRequest, client: ServiceClient) -> Home | None:
        """The partition's home: as the plan says, or (a stream's first batch, planned before any service was
        known) as the driver says once this executor's service has told it that it exists.

        A task whose ranges have a home still has its own executor's service told of the query, once per process:
        packed tasks are few (one per home on a quiet stream), and an executor whose service the driver never hears
        of never becomes a home, so every partition would stay homed on the executors that ran a first batch."""
        if not request.homes or request.query is None or request.driver is None:
            return request.home
        if request.home is not None:
            if request.query.query not in self._announced:
                self._announce(request, client)
            return request.home
        if not driver_channel.REACH.reachable(request.driver):
            return None  # found out before: no home to ask for (the task reads through its own service)
        # which executor this task runs in, before its service (which may be starting cold) tells the driver
        # it exists: the driver places no home before that service has come
        jvm = jvm_name(executor_pid())
        if jvm is not None:
            driver_channel.tell(request.driver, request.query, {"kind": "coming", "jvm": jvm})
        hello = client.hello(request)  # this executor's service registers the query and tells the driver
        if hello.get("driver") is False:  # the service could not reach the driver: neither will this worker
            driver_channel.REACH.failed(
                request.driver, "this executor's receiver service could not reach it", probed=False
            )
            return None
        answer = driver_channel.ask(request.driver, request.query, {"kind": "home", "partition": request.partition},
                             timeout=_ASK_HOME_TIMEOUT)  # fmt: skip
        found = answer.get("home") if answer else None
        if not isinstance(found, dict):
            return None
        try:
            return Home(str(found["executor"]), tuple(str(h) for h in found["hosts"]), int(found["port"]))
        except (KeyError, TypeError, ValueError):
            return None

    def _announce(self, request: RangeRequest, client: ServiceClient) -> None:
        """Tell this executor's service of the query (it tells the driver, which may make it a home from the next
        batch); once per process and query, whatever the outcome: the read goes on either way."""
        assert request.query is not None and request.driver is not None
        self._announced.add(request.query.query)
        if not driver_channel.REACH.reachable(request.driver):
            return
        try:
            client.hello(request)
        except OSError as exc:
            _LOG.info("eventhubs: hub %s: this executor's receiver service was not told of the query (%s); the "
                      "task reads from the partitions' homes", request.settings.hub, exc)  # fmt: skip

    def _home_client(self, home: Home, request: RangeRequest) -> HomeClient:
        """This worker's kept connection to a home, for one query."""
        assert request.query is not None
        key = (home, request.query.query)
        homes: dict[tuple[Home, str], HomeClient] | None = getattr(self._local, "homes", None)
        if homes is None:
            homes = self._local.homes = {}
        client = homes.get(key)
        if client is None:
            # the same service at a new port (it listens again after losing one): the old connection goes
            for (known, query), old in list(homes.items()):
                if known.executor == home.executor and query == key[1]:
                    old.close()
                    del homes[(known, query)]
            client = homes[key] = HomeClient(home, request.query)
        return client

    def _home_down(self, request: RangeRequest, home: Home) -> bool:
        """Whether this process found that home unreachable for the query (and has not reached it since)."""
        with self._lock:
            return (request.query.query if request.query else "", home.executor) in self._unreachable

    def _home_unreachable(self, request: RangeRequest, home: Home, exc: BaseException, remember: bool = True) -> None:
        """Said once per process, query and home, here and to the driver (which checks the home itself and
        places the partition elsewhere when it is gone); with ``remember`` (it could not be reached), the next
        tasks do not try it until a thread of its own reaches its port again (every ``recheck`` seconds)."""
        key = (request.query.query if request.query else "", home.executor)
        with self._lock:
            if key in self._unreachable or (key in self._said and not remember):
                return
            if remember:
                self._unreachable.add(key)
            said_before = key in self._said
            self._said.add(key)

        def recheck() -> None:
            sockets.wait_until_reached(home.hosts, home.port, self.recheck)
            with self._lock:  # reached again (or an hour gone by: a task may try it afresh, once)
                self._unreachable.discard(key)

        if remember:
            threading.Thread(target=recheck, name="eventhubs-home-recheck", daemon=True).start()
        if said_before:
            return
        why = f"the home of partition {request.partition}, executor {home.executor}, cannot serve it ({exc})"
        _LOG.warning("eventhubs: %s; reading in this worker without read-ahead", why)
        driver_channel.tell(request.driver, request.query, {"kind": "home_unreachable", "executor": home.executor,
                     "host": socket.gethostname(), "why": why})  # fmt: skip

    def _fallback(self, message: str, request: RangeRequest) -> None:
        """Said once per process, here and to the driver: a worker that cannot use the service reads for itself."""
        if not self._fallback_logged:
            self._fallback_logged = True
            _LOG.warning("eventhubs: %s", message)
            notice = {"kind": "worker_reads", "host": socket.gethostname(), "executor": executor_pid(), "why": message}
            driver_channel.tell(request.driver, request.query, notice)


_CURRENT: Runtime | None = None
_CURRENT_LOCK = threading.Lock()


def current() -> Runtime:
    """This process's runtime, built on first use."""
    global _CURRENT
    with _CURRENT_LOCK:
        if _CURRENT is None:
            _CURRENT = Runtime()
        return _CURRENT


def use(runtime: Runtime | None) -> Runtime | None:
    """Make ``runtime`` this process's (None: build a new one on next use); returns the one it replaces."""
    global _CURRENT
    with _CURRENT_LOCK:
        previous, _CURRENT = _CURRENT, runtime
        return previous


# Spark's Python worker runs a full garbage collection after every task it serves (pyspark's daemon,
# between the tasks of a reused worker). A full collection walks every object the process tracks, and a
# worker that has imported pyspark, pyarrow, pandas, numpy, the Azure SDK and this package tracks about
# tens of thousands that live as long as it does: more CPU per task than a quiet stream's task spends reading
# (bench `task_cost`), once per task of every micro-batch. So a worker's second task
# here moves what the worker holds out of the collector's sight (gc.freeze; the second, not the first, so
# that what the first task imported is included and its garbage was collected by then). Frozen objects are
# still freed when their last reference goes; only a reference cycle among them is never collected, and
# they are the worker's modules and caches. EVENTHUBS_SPARK_GC_FREEZE=false (e.g. as
# spark.executorEnv.EVENTHUBS_SPARK_GC_FREEZE) leaves the collector alone.
GC_FREEZE_ENV = "EVENTHUBS_SPARK_GC_FREEZE"
_tasks_started = 0


def gc_freeze_wanted() -> bool:
    """EVENTHUBS_SPARK_GC_FREEZE as a switch (unset: on). Any other value than a yes or a no is an error
    that names the variable: a typo must not leave the freeze on (or off) without a word."""
    raw = os.environ.get(GC_FREEZE_ENV)
    text = "true" if raw is None else raw.strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise OptionError(
        f"{GC_FREEZE_ENV}: expected true or false, got {raw!r}. "
        f"Example: spark.executorEnv.{GC_FREEZE_ENV}=false (or unset it: the default is true)",
        f"spark.executorEnv.{GC_FREEZE_ENV}=false",
    )


def task_started() -> None:
    """Called as a read or write task starts; counts only in a Spark Python worker running a task (a
    TaskContext exists): a direct call outside Spark, as in tests, changes nothing. A bad
    EVENTHUBS_SPARK_GC_FREEZE fails every task, with the error ``gc_freeze_wanted`` raises."""
    from pyspark import TaskContext

    global _tasks_started
    if TaskContext.get() is None:
        return
    wanted = gc_freeze_wanted()
    _tasks_started += 1
    if _tasks_started != 2 or not wanted:
        return
    gc.freeze()
    if _LOG.isEnabledFor(logging.DEBUG):  # the count walks every frozen object: only when it is said
        _LOG.debug("eventhubs: %d objects of this worker left out of its garbage collections", gc.get_freeze_count())


# Spark plans a stream in a Python process of its own, one per streaming source (pyspark's
# python_streaming_source_runner), which lives as long as the query. It holds what the reader imported and
# built (pyspark, pyarrow, the Azure SDK, this package; at 1,024 partitions the partitions' properties and
# positions), and a full collection there walked all of it: most of a big hub's trigger, in whichever trigger it
# fell (bench `planning`). So, as in a worker, what the runner holds once its first trigger is
# planned is frozen out of the collector's sight (everything planning imports is imported by then), and later
# collections walk only what triggers made since. EVENTHUBS_SPARK_GC_FREEZE=false in the driver's environment
# leaves it alone. Only in that process: a reader planned elsewhere (a test calling latestOffset) never freezes.
STREAM_RUNNER = "python_streaming_source_runner.py"
_runner_frozen = False


def _in_stream_runner() -> bool:
    """True in Spark's stream runner process (its ``__main__`` is pyspark's runner file)."""
    main = getattr(sys.modules.get("__main__"), "__file__", None) or ""
    return os.path.basename(main) == STREAM_RUNNER


def stream_runner_planned(flush: Callable[[float], object] | None = None) -> None:
    """Called as a stream reader's trigger is planned: the first call in Spark's stream runner process freezes
    what the process holds (see above) and has ``flush`` run when Spark ends the process
    (:func:`flush_on_termination`); every other call, and any call in another process, changes nothing."""
    global _runner_frozen
    if _runner_frozen or not _in_stream_runner():
        return
    _runner_frozen = True  # first: a misspelt setting fails this trigger once, not every trigger after it
    if flush is not None:
        flush_on_termination(flush)
    if not gc_freeze_wanted():
        return
    gc.freeze()
    if _LOG.isEnabledFor(logging.DEBUG):
        _LOG.debug("eventhubs: %d objects of the stream runner left out of its collections", gc.get_freeze_count())


# Spark ends the stream runner with SIGTERM (it never calls the reader's stop()). A thread of the runner may then be
# writing the checkpoint store (the checkpoint mirror writes the batches before a trigger while the next batch
# runs), and the process dying mid-write left the store a batch further behind than the query: whoever resumed from
# the store read that batch again. So the runner's main thread (where Spark calls the reader; Python runs a signal's
# handler there, between the socket reads it waits in) finishes such work first, each flush at most
# TERMINATION_FLUSH seconds, then ends as the signal would have ended it.
TERMINATION_FLUSH = 10.0
_flushes: list[Callable[[float], object]] = []
_previous_sigterm: Any = None


def flush_on_termination(flush: Callable[[float], object]) -> None:
    """In Spark's stream runner, on its main thread: run ``flush(seconds)`` (bounded by the seconds given) when
    Spark ends the process; anywhere else, nothing."""
    global _previous_sigterm
    if not _in_stream_runner() or threading.current_thread() is not threading.main_thread():
        return
    if not _flushes:
        _previous_sigterm = signal.signal(signal.SIGTERM, _on_sigterm)
    _flushes.append(flush)


def _on_sigterm(signum: int, frame: Any) -> None:
    deadline = time.monotonic() + TERMINATION_FLUSH
    for flush in list(_flushes):
        try:
            flush(max(0.0, deadline - time.monotonic()))
        except Exception:  # ending regardless: what did not flush is said, not raised into Spark's loop
            _LOG.warning("eventhubs: the stream runner could not finish its work before ending", exc_info=True)
    previous = _previous_sigterm
    if callable(previous):
        previous(signum, frame)
        return
    signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)
