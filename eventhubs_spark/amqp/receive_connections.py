"""Receiving links on one AMQP connection per namespace and credential, read by one thread.

The SDK gives every consumer its own connection, session and keep-alive thread, and reads only when
its caller asks. Here a :class:`SharedConnection` holds one connection per (namespace, credential) in
the process, every receiving link of every hub and consumer group is opened on it, and one thread
(the connection's reader) does all the SDK's work for it: opening and closing links, signing them in
again when their tokens are due, granting credit, and reading frames through a :class:`FrameTap`,
which keeps each link's messages (bytes and sequence numbers) in its :class:`LinkSink`. Tasks only wait on
sinks.
"""

from __future__ import annotations

import collections
import functools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from eventhubs_spark.amqp import sdk
from eventhubs_spark.amqp.frame_reader import FrameTap, LinkSink, ReadAheadBudget
from eventhubs_spark.auth.settings import ConnectionSettings
from eventhubs_spark.positions.event_positions import EnqueuedTime, Offset, selector

_LOG = logging.getLogger(__name__)

_LISTEN_BATCH = 64  # frames (or runs of decoded transfers) per listen call
_SIGN_IN_EVERY = 5.0  # seconds between checks of each link's token (renewed when due)
# Seconds between the reader's passes over every link (its token, credit a wider share of the read-ahead budget
# allows, a detach): between them a step looks only at the links something happened to (see SharedConnection._step).
_SWEEP_EVERY = 1.0
_IDLE_CLOSE = 60.0  # a connection without links closes after this long
# How long the reader waits on the socket when nothing arrives. Whatever another thread needs of the
# connection (a link to open or close, credit for a sink that was full) wakes it sooner: a full sink given
# room must not wait this out, or its link (and the task reading it) stalls meanwhile.
_READ_WAIT = 0.2


@dataclass(frozen=True)
class LinkSpec:
    """What a receiving link reads: where, from which event, and how far it may read ahead."""

    consumer_group: str
    partition: str
    # the first sequence number it reads; or a position by offset or enqueued time, whose first event only a
    # lookup wants (planning/position_lookup.py: where a stream starts, on the process's one connection)
    start: int | Offset | EnqueuedTime
    owner_level: int | None
    prefetch: int
    read_ahead_events: int
    read_ahead_bytes: int


class Link:
    """One receiving link of a :class:`SharedConnection`; its events arrive in :attr:`sink`."""

    def __init__(self, settings: ConnectionSettings, spec: LinkSpec, budget: ReadAheadBudget | None = None) -> None:
        self.settings = settings
        self.spec = spec
        self.sink = LinkSink(spec.prefetch, spec.read_ahead_events, spec.read_ahead_bytes, budget)
        self.consumer: Any = None  # the SDK consumer, made and used on the reader thread only
        self.state = "opening"  # opening | open | closed
        self.signed_in_at = 0.0
        self.moved: Callable[[Link], None] | None = None  # its connection's: this link's credit needs a look

    def on_sdk_message(self, message: Any) -> None:
        """A message the SDK decoded itself (a transfer the tap left to it): kept in its place in the order."""
        self.sink.add_sdk_message(message)
        if self.moved is not None:
            self.moved(self)  # it took credit, as a tapped transfer does


class SharedConnection:
    """One AMQP connection for every receiving link of a (namespace, credential) in this process."""

    def __init__(self, settings: ConnectionSettings, registry: Connections) -> None:
        self.settings = settings
        self._registry = registry
        self._manager = sdk.SharedConnections()
        self._clients: dict[str, Any] = {}  # one SDK consumer client per hub, all on the shared connection
        self._connection: Any = None
        self._tap: FrameTap | None = None
        self._links: list[Link] = []
        # Which links a step looks at (a connection may hold 1,024 of them, and a busy connection steps hundreds of
        # times a second: a walk over all each time would be its main cost): those still opening, and those whose
        # credit may need topping up (events came, its reader made room, it just opened). Every _SWEEP_EVERY
        # seconds a step looks at all of them.
        self._opening: list[Link] = []
        self._due: set[Link] = set()  # the reader thread's
        self._roomed: collections.deque[Link] = collections.deque()  # readers made room (any thread)
        self._link_of: dict[LinkSink, Link] = {}
        self._swept_at = 0.0
        self._commands: collections.deque[tuple[str, Link]] = collections.deque()  # ("open" | "close", link)
        self._wakeup = threading.Event()
        self._empty_since: float | None = None
        self.closed = False
        self.attaches = 0  # links opened over this connection's life
        self._thread = threading.Thread(target=self._run, name=f"eventhubs-reader-{settings.namespace}", daemon=True)
        self._thread.start()

    # -- any thread (opening goes through Connections.open_link, which knows the connection is alive) --
    def close_link(self, link: Link) -> None:
        self._submit("close", link)

    def _submit(self, what: str, link: Link) -> None:
        self._commands.append((what, link))
        self._wakeup.set()
        self._wake_reader()

    def _wake_reader(self) -> None:
        """End the reader's wait on the socket now (a command waits, or a full sink was given room)."""
        tap = self._tap
        if tap is not None:
            tap.wake()

    def _run_commands(self) -> None:
        while self._commands:
            what, link = self._commands.popleft()
            if what == "open":
                link.sink.on_room = functools.partial(self._room, link)
                link.moved = self._mark_due
                self._links.append(link)
                self._opening.append(link)
                self._link_of[link.sink] = link
            else:
                self._close(link)

    def _mark_due(self, link: Link) -> None:
        """``link`` took events the tap left to the SDK (on the reader thread): its credit needs a look."""
        self._due.add(link)

    def _room(self, link: Link) -> None:
        """``link``'s reader (a task, on its own thread) took events from its full sink: read on at once."""
        self._roomed.append(link)
        self._wake_reader()

    # -- the reader thread --
    def _run(self) -> None:
        try:
            while True:
                self._run_commands()
                if not self._links:
                    now = time.monotonic()
                    self._empty_since = self._empty_since or now
                    if now - self._empty_since > _IDLE_CLOSE and self._registry.retire(self):
                        break
                    if self._connection is None:
                        self._wakeup.wait(1.0)
                        self._wakeup.clear()
                        continue
                else:
                    self._empty_since = None
                self._step()  # with no links, it still reads: heartbeats go out, a close from the service is seen
        except Exception as exc:  # never silent: every link learns why, and readers fail or reopen
            _LOG.warning("reader of %s stopped: %s", self.settings.namespace, exc, exc_info=True)
            self._fail_all(f"{type(exc).__name__}: {exc}", exc)
        finally:
            self._shut_down()

    def _step(self) -> None:
        """Open what is opening, top up credit and renew tokens, read, and see links the service detached.

        Only the links something happened to are looked at: credit moves when events arrive (the tap says which
        links took some) or a full sink's reader makes room (it says so), and a link is detached only by a frame
        other than a transfer (the tap counts those). Every :data:`_SWEEP_EVERY` seconds every link is looked at:
        tokens come due with time, a link closing elsewhere widens every link's share of the read-ahead budget,
        and whatever else changed unseen is found within that."""
        opening = bool(self._opening)
        for link in list(self._opening):
            self._advance(link)
        tap = self._tap
        if tap is not None:
            tap.timeout = 0.002 if opening else _READ_WAIT
        connection = self._connection
        if connection is None:
            if self._opening:
                return  # the first link is still opening the connection
            self._wakeup.wait(0.2)
            self._wakeup.clear()
            return
        now = time.monotonic()
        sweep = now - self._swept_at >= _SWEEP_EVERY
        if sweep:
            self._swept_at = now
        for link in self._to_keep(sweep):
            if link.state == "open":
                self._keep(link, now)
        try:
            sdk.listen(connection, wait=_READ_WAIT, batch=_LISTEN_BATCH)
        except Exception as exc:
            self._connection_failed(f"{type(exc).__name__}: {exc}", exc)
            return
        finally:
            if self._tap is not None:
                self._tap.publish()
        closed = sdk.connection_closed(connection)
        if closed is not None:
            self._connection_failed(str(closed), closed)
            return
        if sweep or self._tap is None or self._tap.take_controls():
            for link in list(self._links):
                if link.state == "open":
                    error = sdk.link_detached(link.consumer)
                    if error is not None:
                        self._fail(link, str(error), error)

    def _to_keep(self, sweep: bool) -> list[Link]:
        """The links whose credit and token this step looks at: all of them in a sweep, else those that took
        events, were given room or opened since the last step."""
        due, self._due = self._due, set()
        while self._roomed:
            due.add(self._roomed.popleft())
        if self._tap is not None:
            link_of = self._link_of
            for sink in self._tap.take_moved():
                link = link_of.get(sink)
                if link is not None:
                    due.add(link)
        return list(self._links) if sweep else list(due)

    def _advance(self, link: Link) -> None:
        """One step of opening ``link`` (the first link opens the connection itself)."""
        spec = link.spec
        try:
            if link.consumer is None:
                hub = link.settings.hub
                client = self._clients.get(hub)
                if client is None:
                    client = self._clients[hub] = link.settings.consumer(
                        consumer_group=spec.consumer_group, **link.settings.network.reader_kwargs()
                    )
                    sdk.share_connection(client, self._manager)
                start: Any = spec.start
                inclusive = True
                if not isinstance(start, int):  # a lookup's offset or enqueued time: its filter
                    _, inclusive, start = selector(start)
                link.consumer = sdk.new_consumer(
                    client, spec.consumer_group, spec.partition, start, link.on_sdk_message,
                    inclusive=inclusive, owner_level=spec.owner_level, prefetch=spec.prefetch,
                )  # fmt: skip
                self.attaches += 1
                self._registry.attaches += 1
            ready = sdk.open_step(link.consumer)
        except Exception as exc:
            self._fail(link, f"{type(exc).__name__}: {exc}", exc)
            return
        if self._connection is None and sdk.has_connection(link.consumer):
            self._connection = sdk.adopt(link.consumer, self._manager)
            self._tap = FrameTap(self._connection)
            if self._tap.unsupported is not None:
                _slow_path(self._tap.unsupported)
        sdk.attach_sink(link.consumer, link.sink)
        if ready:
            link.state = "open"
            link.sink.vouch_changed()
            link.signed_in_at = time.monotonic()
            self._opening.remove(link)
            self._due.add(link)

    def _keep(self, link: Link, now: float) -> None:
        """Credit while what the link holds stays under its bounds; its token renewed when due."""
        sdk_link = sdk.consumer_link(link.consumer)
        window = link.sink.window()
        if sdk_link is not None and sdk.credit(sdk_link) <= window >> 1 and link.sink.room_for_credit():
            sdk.grant(sdk_link, window)  # its reader took what it held: read on
        if now - link.signed_in_at > _SIGN_IN_EVERY:
            link.signed_in_at = now
            try:
                sdk.keep_signed_in(link.consumer)
            except Exception as exc:
                self._fail(link, f"{type(exc).__name__}: {exc}", exc)

    def _fail(self, link: Link, error: str, exc: BaseException | None) -> None:
        if self._tap is not None:
            self._tap.publish()  # what was read before the failure stays readable
        link.sink.fail(error, exc)
        self._close(link)

    def _close(self, link: Link) -> None:
        if link in self._links:
            self._links.remove(link)
        if link in self._opening:
            self._opening.remove(link)
        self._due.discard(link)
        self._link_of.pop(link.sink, None)
        if link.state == "closed":
            return
        link.state = "closed"
        if link.consumer is not None:
            try:
                sdk.close_consumer(link.consumer)
            except Exception:  # the link may already be gone with its connection
                _LOG.debug("closing a link failed", exc_info=True)
        link.sink.fail("the link was closed", None)

    def _connection_failed(self, error: str, exc: BaseException | None) -> None:
        """Every link of the connection ends with ``error``; the next link opens a new connection."""
        _LOG.info("connection to %s ended: %s", self.settings.namespace, error)
        self._fail_all(error, exc)
        self._drop_connection()

    def _fail_all(self, error: str, exc: BaseException | None) -> None:
        if self._tap is not None:
            self._tap.publish()
        for link in list(self._links):
            link.sink.fail(error, exc)  # (counted as a change: the sink's error ends its vouch before the state)
            link.state = "closed"
        self._forget_links()

    def _forget_links(self) -> None:
        self._links = []
        self._opening = []
        self._due = set()
        self._link_of = {}

    def _drop_connection(self) -> None:
        connection, self._connection = self._connection, None
        tap, self._tap = self._tap, None
        self._manager = sdk.SharedConnections()
        for client in self._clients.values():
            sdk.share_connection(client, self._manager)
        if tap is not None:
            tap.close()
        if connection is not None:
            try:
                sdk.close_connection(connection)
            except Exception:
                _LOG.debug("closing a connection failed", exc_info=True)

    def _shut_down(self) -> None:
        self._registry.retire(self, force=True)  # no link opens here any more
        for link in self._links + [link for _, link in self._commands]:
            link.sink.fail("the connection was closed", None)
        self._forget_links()
        self._commands.clear()
        self._drop_connection()
        for client in self._clients.values():
            try:
                client.close()
            except Exception:
                _LOG.debug("closing a client failed", exc_info=True)


_SLOW_PATH_LOGGED = False


def _slow_path(transport: str) -> None:
    """The frame tap reads this connection frame by frame through the SDK's transport: correct, slower
    than its own large socket reads. Said once per process, never silently."""
    global _SLOW_PATH_LOGGED
    if not _SLOW_PATH_LOGGED:
        _SLOW_PATH_LOGGED = True
        _LOG.warning("eventhubs: the connector cannot read the socket of this connection's transport (%s); it "
                     "reads frame by frame through the SDK's transport instead, which is slower",
                     transport)  # fmt: skip


class Connections:
    """The process's shared connections, by namespace and credential.

    Because the reader runs between tasks too, a link reads ahead: it keeps granting credit while what
    it holds stays under its bounds (events and bytes), so the next range is often in memory before its
    task starts. Nothing of the SDK is touched from any other thread, so nothing needs a lock but the
    sinks' hand-over and the queue of commands.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_key: dict[tuple[Any, ...], SharedConnection] = {}
        self.attaches = 0  # receiving links opened by this process, over its life
        self.budget = ReadAheadBudget(self.open_links)  # the read-ahead bytes every link of the process shares

    def open_links(self) -> int:
        """Receiving links open (or opening) on the process's connections now."""
        return sum(len(c._links) + len(c._commands) for c in list(self._by_key.values()))

    @staticmethod
    def key(settings: ConnectionSettings) -> tuple[Any, ...]:
        namespace, _hub, credential = settings.pool_key()
        return (namespace, credential, settings.emulator)

    def open_link(self, settings: ConnectionSettings, spec: LinkSpec) -> tuple[SharedConnection, Link]:
        """A link reading ``spec`` on the shared connection of ``settings`` (opened if there is none); it
        opens on the connection's reader thread, and any failure lands in its sink."""
        key = self.key(settings)
        link = Link(settings, spec, self.budget)
        with self._lock:
            connection = self._by_key.get(key)
            if connection is None or connection.closed:
                connection = self._by_key[key] = SharedConnection(settings, self)
            connection._submit("open", link)
        return connection, link

    def retire(self, connection: SharedConnection, force: bool = False) -> bool:
        """Take an idle connection out of use, unless a link was just asked of it (``force``: in any case)."""
        with self._lock:
            if connection._commands and not force:
                return False
            connection.closed = True
            key = self.key(connection.settings)
            if self._by_key.get(key) is connection:
                del self._by_key[key]
            return True
