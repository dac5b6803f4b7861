"""A streaming query's driver side between batches: the live receiver services and each partition's home.

And what executors tell the driver.

Why it is built so: the design notes in docs/pages/architecture.md.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from concurrent import futures
from typing import Any

from eventhubs_spark.executor.service_files import executor_pid, jvm_name
from eventhubs_spark.interprocess.driver_channel import DriverChannel
from eventhubs_spark.interprocess.partition_ends import EndsClient, Vouch
from eventhubs_spark.interprocess.sockets import reaches
from eventhubs_spark.interprocess.task_ranges import DriverAddress, Home, QueryKey, new_query_key
from eventhubs_spark.planning.partition_placement import homes
from eventhubs_spark.positions.partition_catalog import by_number

_LOG = logging.getLogger(__name__)

EXPIRY = 30.0  # seconds without an announcement before a service is no longer a home
# A trigger asks each live service where its links' partitions end (interprocess.partition_ends): each step
# (connect, handshake, answer) within ENDS_TIMEOUT seconds; a service that did not answer is not asked again for
# ENDS_RETRY_AFTER seconds (its partitions are asked of Event Hubs meanwhile, as without services).
ENDS_TIMEOUT = 1.0
ENDS_RETRY_AFTER = 60.0
ASKERS = 32  # threads a trigger asks the services on at once (each answers in about a millisecond)
SETTLE = 1.5  # a first batch's answer waits until no new service came for this long...
MAX_SETTLE = 10.0  # ...but not longer than this after the question


class QueryDriver:
    """One streaming query's key, channel, live services and homes (in the stream runner process)."""

    def __init__(
        self,
        hub: str,
        clock: Callable[[], float] = time.monotonic,
        bind: str = "0.0.0.0",
        on_read: Callable[[str, int, int | None, str | None], None] | None = None,
        ports: str = "0",
    ) -> None:
        """``on_read(partition, end, enqueued_micros, offset)``: a task read a range of the partition up to ``end``,
        its last event enqueued then (the query's lag figures, :mod:`eventhubs_spark.lag`; None when no event was
        left of it to read) and at ``offset`` (the event at ``end - 1``; None when the task did not say: the
        checkpoint mirror's)."""
        self.hub = hub
        self.on_read = on_read
        self.clock = clock
        self.query: QueryKey = new_query_key()
        self._services: dict[str, tuple[Home, float]] = {}
        self._partitions: list[str] = []
        self._last_new = clock()
        self._said: set[tuple[Any, ...]] = set()
        self._dropped: set[str] = set()  # services dropped as unreachable (see _service)
        self._jvms: dict[str, str | None] = {}  # each service's executor JVM, as it names it (host:pid)
        self._expected: dict[str, float] = {}  # executor JVMs a first batch's task runs in, since when
        self.jvm = jvm_name(executor_pid())  # the stream runner's JVM: the driver's
        self._cond = threading.Condition()
        self._ends_clients: dict[str, EndsClient] = {}  # a kept connection to each service asked (executor_ends)
        self._ends_lock = threading.Lock()  # _ends_clients: the planning thread and connect_ahead's threads
        self._ends_wanted = False  # the query's triggers ask the services (want_ends): connect to each ahead
        self._ends_failed: dict[str, float] = {}  # services that did not answer, and when
        self._asker_pool: futures.ThreadPoolExecutor | None = None  # see _askers
        self.channel = DriverChannel(self.query, self.handle, bind=bind, ports=ports)

    def address(self) -> DriverAddress:
        return self.channel.address()

    def _askers(self) -> futures.ThreadPoolExecutor:
        """The threads a trigger asks services but the first on (made at the first trigger that asks two)."""
        with self._ends_lock:
            if self._asker_pool is None:
                self._asker_pool = futures.ThreadPoolExecutor(ASKERS, thread_name_prefix="eventhubs-ends-ask")
            return self._asker_pool

    def close(self) -> None:
        self.channel.close()
        if self._asker_pool is not None:
            self._asker_pool.shutdown(wait=False)
        with self._ends_lock:
            clients = list(self._ends_clients.values())
            self._ends_clients.clear()
        for client in clients:
            client.close()

    def want_ends(self) -> None:
        """The query's triggers ask the services where partitions end (a running stream's, not a Trigger.AvailableNow
        run's): from now on each live service, and each that announces itself later, is connected to ahead, on a
        thread of its own, so the first question is not also a connect and a handshake on a trigger's path."""
        if self._ends_wanted:
            return
        self._ends_wanted = True
        for home in self.live():
            self._connect_ahead(home)

    def _client(self, home: Home) -> EndsClient:
        """The kept connection to ``home``'s service (a new one when it has none, or its address changed)."""
        with self._ends_lock:
            client = self._ends_clients.get(home.executor)
            if client is not None and client.home == home:
                return client
            old, client = client, EndsClient(home, self.query)
            self._ends_clients[home.executor] = client
        if old is not None:
            old.close()
        return client

    def _connect_ahead(self, home: Home) -> None:
        def connect() -> None:
            client = self._client(home)
            try:
                client.connect(ENDS_TIMEOUT)
            except Exception as exc:
                with self._ends_lock:
                    if self._ends_clients.get(home.executor) is not client:
                        return  # dropped (or replaced) meanwhile: nothing to say of it
                # as a failed question: its partitions are asked of Event Hubs until ENDS_RETRY_AFTER has passed,
                # instead of the next trigger waiting ENDS_TIMEOUT on a service that could not be reached just now
                self._ends_failed[home.executor] = self.clock()
                _LOG.info("eventhubs: hub %s: receiver service %s could not be reached ahead of the triggers' "
                          "questions of where partitions end (%s: %s); they are asked of Event Hubs, and the service "
                          "again in %g s", self.hub, home.executor, type(exc).__name__, str(exc)[:200],
                          ENDS_RETRY_AFTER)  # fmt: skip

        threading.Thread(target=connect, name="eventhubs-ends-connect", daemon=True).start()

    def executor_ends(self) -> dict[str, Vouch] | None:
        """Where partitions end as the live services' links know it, asked of every service at once (one question a
        service, not one a partition; :mod:`eventhubs_spark.interprocess.partition_ends`), the furthest end where
        two vouch for one partition. None when no service could be asked: the trigger asks Event Hubs, as before
        any service existed. Called by the stream runner's planning thread only."""
        now = self.clock()
        gone = self.unreachable()
        failed = self._ends_failed
        services = [h for h in self.live() if h.executor not in gone
                    and now - failed.get(h.executor, now - ENDS_RETRY_AFTER) >= ENDS_RETRY_AFTER]  # fmt: skip
        wanted = {h.executor for h in services}
        with self._ends_lock:
            dropped = [self._ends_clients.pop(e) for e in list(self._ends_clients) if e not in wanted]
        for client in dropped:
            client.close()  # gone, dropped or failing: a new connection when asked again
        if not services:
            return None
        answers: list[dict[str, Vouch]] = []

        def ask_one(home: Home) -> None:
            try:
                answers.append(self._client(home).ask(ENDS_TIMEOUT))
            except Exception as exc:  # best effort: its partitions are asked of Event Hubs
                self._ends_failed[home.executor] = self.clock()
                _LOG.info("eventhubs: hub %s: receiver service %s did not say where its partitions end (%s: %s); "
                          "they are asked of Event Hubs, and the service again in %g s", self.hub, home.executor,
                          type(exc).__name__, str(exc)[:200], ENDS_RETRY_AFTER)  # fmt: skip
                return
            self._ends_failed.pop(home.executor, None)

        # every service at once: the others on the askers' kept threads (a thread started a service a trigger
        # waited for the new thread to take the GIL), the first on the planning thread itself
        others = [self._askers().submit(ask_one, h) for h in services[1:]]
        ask_one(services[0])
        if others:
            futures.wait(others, 4 * ENDS_TIMEOUT)
        if not answers:
            return None
        if len(answers) == 1:
            return dict(answers[0])  # a copy: the client applies its next answer to its own
        merged: dict[str, Vouch] = {}
        for found in list(answers):
            for partition, vouch in found.items():
                known = merged.get(partition)
                if known is None or vouch.end > known.end:
                    merged[partition] = vouch
        return merged

    def live(self) -> list[Home]:
        """The services heard from within EXPIRY seconds, by id."""
        now = self.clock()
        with self._cond:
            return [home for _, (home, seen) in sorted(self._services.items()) if now - seen <= EXPIRY]

    def homes(self, partitions: Iterable[str]) -> dict[str, Home]:
        """Each partition's home over the live services (empty while none is known)."""
        with self._cond:
            self._partitions = sorted(set(partitions) | set(self._partitions), key=by_number)
        live = {home.executor: home for home in self.live()}
        return {p: live[e] for p, e in homes(self.hub, self._partitions, live).items()}

    # -- what executors say --
    def handle(self, message: dict[str, Any]) -> dict[str, Any] | None:
        kind = message.get("kind")
        if kind == "service":
            return self._service(message)
        if kind == "home":
            return self._home(str(message.get("partition", "")))
        if kind == "coming":
            return self._coming(message)
        if kind == "gone":
            return self._gone(message)
        if kind in ("worker_reads", "home_unreachable"):
            self._told(kind, message)
            return {"ok": True}
        if kind == "read":
            self._read(message.get("ranges"))
            return {"ok": True}
        return None

    def _read(self, ranges: Any) -> None:
        if self.on_read is None or not isinstance(ranges, list):
            return
        for entry in ranges:
            try:
                partition, end = str(entry[0]), int(entry[1])
                micros = int(entry[2]) if len(entry) > 2 else None  # None: the range had no event left to read
            except (TypeError, ValueError, IndexError):
                continue  # a malformed entry says nothing (the time of that partition stays unknown)
            offset = entry[3] if len(entry) > 3 and type(entry[3]) is str else None
            self.on_read(partition, end, micros, offset)

    def unreachable(self) -> set[str]:
        """The services a task could not reach and the driver could not either (dropped as homes)."""
        with self._cond:
            return set(self._dropped)

    def _service(self, message: dict[str, Any]) -> dict[str, Any] | None:
        try:
            home = Home(str(message["executor"]), tuple(str(h) for h in message["hosts"]), int(message["port"]))
        except (KeyError, TypeError, ValueError):
            return None
        with self._cond:
            dropped = home.executor in self._dropped
        if dropped:
            # dropped because its port could not be reached: it comes back once the driver reaches it, not on
            # its word alone (a service still announcing a port behind a firewall would flap in and out)
            if not _reaches(home):
                return {"ok": True}
            with self._cond:
                self._dropped.discard(home.executor)
            _LOG.info("eventhubs: hub %s: receiver service %s is reachable again (port %d): a home again",
                      self.hub, home.executor, home.port)  # fmt: skip
        with self._cond:
            known = self._services.get(home.executor)
            new = known is None or known[0] != home or self.clock() - known[1] > EXPIRY
            if new:
                self._last_new = self.clock()
                _LOG.info("eventhubs: hub %s: receiver service %s serves the query (port %d)", self.hub,
                          home.executor, home.port)  # fmt: skip
            self._services[home.executor] = (home, self.clock())
            jvm = message.get("jvm")
            self._jvms[home.executor] = jvm if isinstance(jvm, str) else None
            self._cond.notify_all()
        if new and self._ends_wanted:
            self._connect_ahead(home)
        return {"ok": True}

    def _coming(self, message: dict[str, Any]) -> dict[str, Any]:
        """A first batch's task says which executor (JVM) it runs in before its service may be up: a service
        that starts cold (its first worker spawns it) announces seconds after the warm ones, and homes placed
        before it came would move once it does, throwing away the read-ahead of each partition that moves."""
        jvm = message.get("jvm")
        if isinstance(jvm, str) and jvm:
            with self._cond:
                self._expected.setdefault(jvm, self.clock())
                self._cond.notify_all()
        return {"ok": True}

    def _gone(self, message: dict[str, Any]) -> dict[str, Any]:
        """A service says it is going (its executor ended, or it exits idle): no longer a home, from the next plan
        on, instead of when its last announcement is EXPIRY seconds old. A service that comes back announces
        itself again (a new executor's service has a new id)."""
        executor = str(message.get("executor", ""))
        with self._cond:
            known = self._services.pop(executor, None)
            jvm = self._jvms.pop(executor, None)
            if jvm is not None:
                # its executor ended: a first batch's question no longer waits for that JVM's service (it would
                # have waited MAX_SETTLE seconds in every task of the batch, one executor kill after another)
                self._expected.pop(jvm, None)
            self._cond.notify_all()
        if known is not None:
            _LOG.info("eventhubs: hub %s: receiver service %s has stopped (%s): it is no longer a home", self.hub,
                      executor, str(message.get("why", ""))[:200])  # fmt: skip
        return {"ok": True}

    def _home(self, partition: str) -> dict[str, Any]:
        """A first batch's question: wait for the services to settle (and for the service of each executor a
        task said it runs in), then the partition's home."""
        asked = self.clock()
        with self._cond:
            while True:
                now = self.clock()
                quiet = now - self._last_new
                announced = set(self._jvms.values())
                # a JVM said a task runs in it; its service is awaited for MAX_SETTLE seconds from then, no longer
                # (a service starts cold in a few seconds; an executor killed before its service came never sends one)
                awaited = [j for j, since in self._expected.items() if j not in announced and now - since < MAX_SETTLE]
                # services dropped as unreachable count as come: a task is not held while the driver waits for a
                # service that is already there (every task of every batch waited MAX_SETTLE behind a firewall on
                # the homes' ports, with the driver's port open)
                came = self._services or self._dropped
                settled = came and (quiet >= SETTLE or self._local()) and not awaited
                if settled or now - asked >= MAX_SETTLE:
                    break
                wait = MAX_SETTLE - (now - asked)
                if quiet < SETTLE:
                    wait = min(wait, SETTLE - quiet)
                if awaited:  # until the first awaited JVM stops being awaited (or a service comes)
                    wait = min(wait, min(MAX_SETTLE - (now - self._expected[j]) for j in awaited))
                self._cond.wait(max(0.05, wait))
        home = self.homes([partition]).get(partition)
        if home is None:
            return {}
        return {"home": {"executor": home.executor, "hosts": list(home.hosts), "port": home.port}}

    def _local(self) -> bool:
        """Local mode: every service known runs in the driver's own JVM, so no other executor will come
        (called with the lock held)."""
        return self.jvm is not None and all(self._jvms.get(e) == self.jvm for e in self._services)

    def _told(self, kind: str, message: dict[str, Any]) -> None:
        host, executor = message.get("host"), message.get("executor")
        why = str(message.get("why", ""))[:500]
        if kind == "home_unreachable":
            gone = not self._reachable(str(executor))
            if gone:
                with self._cond:
                    if self._services.pop(str(executor), None) is not None:
                        self._dropped.add(str(executor))
            key: tuple[Any, ...] = (kind, host, executor)
            if key not in self._said:
                self._said.add(key)
                _LOG.warning("eventhubs: hub %s: a task on %s could not read from its partition's home: %s%s",
                             self.hub, host, why, "; the driver cannot reach it either: it is no longer a home"
                             if gone else "; the driver reaches it, so it stays a home (a firewall between "
                             "executors?)")  # fmt: skip
            return
        key = (kind, host, executor)
        if key in self._said:
            return
        self._said.add(key)
        _LOG.warning("eventhubs: hub %s: on executor %s (pid %s) a Python worker reads for itself, without the "
                     "executor's receiver service: %s", self.hub, host, executor, why)  # fmt: skip

    def _reachable(self, executor: str) -> bool:
        """Whether the driver itself reaches that service's port (a connect, nothing sent)."""
        with self._cond:
            known = self._services.get(executor)
        if known is None:
            return False
        return _reaches(known[0])


def _reaches(home: Home) -> bool:
    """Whether this process reaches a service's port (a connect, nothing sent; every address at once, 1 s in all)."""
    return reaches(home.hosts, home.port, timeout=1.0)
