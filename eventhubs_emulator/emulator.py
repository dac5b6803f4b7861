"""The in-process emulator: a namespace served from a thread of its own, with its fault controls (see the
package's documentation)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from .broker import Broker
from .capture import CapturedFile, Capturer, CaptureSettings
from .config import DEFAULT_CONSUMER_GROUP, EmulatorConfig, HubConfig
from .metering import Meter
from .registry import RegistryServer, SchemaRegistry
from .server import Server
from .tls import Certificate, generate

T = TypeVar("T")
_LOG = logging.getLogger("eventhubs_emulator")
DEFAULT_KEY_NAME = "RootManageSharedAccessKey"
DEFAULT_KEY = "SAS_KEY_VALUE"


class Emulator:
    """An Event Hubs namespace on ``host:port`` (port 0 picks a free one), served from a thread."""

    def __init__(
        self,
        hubs: Mapping[str, int] | list[HubConfig] | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        config: EmulatorConfig | None = None,
        keys: Mapping[str, str] | None = None,
        max_message_size: int | None = None,
        token_verifier: Callable[[str], str | None] | None = None,
        idle_timeout: float | None = None,
        link_idle_timeout: float | None = None,
        tls_port: int | None = None,
        websocket_port: int | None = None,
        certificate: Certificate | tuple[str, str] | None = None,
        throughput_units: int | None = None,
        burst_seconds: float = 1.0,
        detach_every: float | None = None,
        detach_condition: str = "amqp:link:detach-forced",
        black_hole_every: float | None = None,
        black_hole_seconds: float = 20.0,
        geo_replicated: bool = False,
        promote_every: float | None = None,
        promote_lose: int = 0,
        schema_registry_port: int | None = None,
        schema_groups: Mapping[str, str] | None = None,
        capture: CaptureSettings | Mapping[str, Any] | None = None,
    ) -> None:
        """``token_verifier`` accepts Microsoft Entra ID tokens (e.g. :meth:`LocalEntra.verify`); with
        ``keys`` or a verifier, every link needs a token the emulator accepts. ``idle_timeout`` and
        ``link_idle_timeout`` (seconds, 0 = off) override the service's idle rules (see
        :class:`EmulatorConfig`), e.g. short ones to test a client's recovery.

        ``tls_port`` serves AMQPS, ``websocket_port`` AMQP over WebSockets with TLS (0: a free port;
        None: not served). ``certificate`` (a :class:`Certificate`, or (certificate file, key file)) is
        the one they present; without it one is generated at start for the listening address,
        127.0.0.1, localhost and this machine's name.

        The real service's limits and faults (all off by default): ``throughput_units`` meters the
        namespace as a Standard one (:mod:`.metering`: sends past the ingress allowance are refused with
        ``com.microsoft:server-busy``, deliveries wait for the egress allowance; ``burst_seconds`` of
        allowance may be used at once); ``detach_every`` seconds every link of events is detached with
        ``detach_condition`` (``amqp:link:detach-forced`` or ``com.microsoft:timeout``);
        ``black_hole_every`` seconds every open connection stops answering for ``black_hole_seconds``.
        ``geo_replicated`` makes every hub geo-replicated (:meth:`add_hub`); ``promote_every`` seconds each
        geo-replicated hub is promoted, losing its partitions' last ``promote_lose`` events (:meth:`promote`).

        ``schema_registry_port`` serves the namespace's Schema Registry over HTTPS (:mod:`.registry`; 0: a free
        port) with the same certificate, its tokens checked by ``token_verifier``; ``schema_groups`` (name ->
        Avro, Json or Custom) are there from the start (:meth:`add_schema_group` adds more).

        ``capture`` (a :class:`~.capture.CaptureSettings`, or its fields as a mapping) switches Event Hubs Capture
        on: each partition's events written to Avro files, window by window, into a local folder or a blob
        container, as the service writes them (:mod:`.capture`; faults: :meth:`capture_pause`,
        :meth:`capture_delay_next`, :meth:`capture_duplicate_next`)."""
        # made here so that a bad count fails the constructor (Meter checks it), not the emulator's thread
        self._meter = Meter(throughput_units, burst_seconds) if throughput_units is not None else None
        self.burst_seconds = burst_seconds
        self.detach_every = detach_every
        self.detach_condition = detach_condition
        self.black_hole_every = black_hole_every
        self.black_hole_seconds = black_hole_seconds
        self.geo_replicated = geo_replicated
        self.promote_every = promote_every
        self.promote_lose = promote_lose
        self._faults: list[asyncio.Task[None]] = []  # the scheduled faults' tasks
        self.token_verifier = token_verifier
        self.config = config or EmulatorConfig()
        if isinstance(hubs, Mapping):
            self.config.hubs.extend(HubConfig(name, count) for name, count in hubs.items())
        elif hubs:
            self.config.hubs.extend(hubs)
        if keys:
            self.config.keys.update(keys)
        if max_message_size is not None:
            self.config.max_message_size = max_message_size
        if idle_timeout is not None:
            self.config.idle_timeout = idle_timeout
        if link_idle_timeout is not None:
            self.config.link_idle_timeout = link_idle_timeout
        self.host = host
        self._port = port
        self._tls_port = tls_port
        self._websocket_port = websocket_port
        if isinstance(certificate, tuple):
            certificate = Certificate(*certificate)
        self.certificate: Certificate | None = certificate
        self.broker = Broker(max_message_size=self.config.max_message_size)
        for hub in self.config.hubs:
            self.broker.add_hub(hub.name, hub.partitions, hub.consumer_groups, hub.retention_seconds,
                                hub.geo_replicated or geo_replicated)  # fmt: skip
        if capture is not None and not isinstance(capture, CaptureSettings):
            capture = CaptureSettings(**dict(capture))
        self.capturer: Capturer | None = Capturer(capture) if capture is not None else None
        if self.capturer is not None:
            self.broker.capture(self.capturer)
        self.schema_registry = SchemaRegistry()
        for group, schema_format in (schema_groups or {}).items():
            self.schema_registry.add_group(group, schema_format)
        self._registry_port = schema_registry_port
        self.registry_server: RegistryServer | None = None
        self.server: Server | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle --
    def start(self) -> Emulator:
        if self._thread is not None:
            return self
        ready: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._thread = threading.Thread(target=self._run, args=(ready,), name="eventhubs-emulator", daemon=True)
        self._thread.start()
        ready.result(timeout=30)
        return self

    def _run(self, ready: concurrent.futures.Future[None]) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        tls = (self._tls_port, self._websocket_port, self._registry_port)
        if self.certificate is None and any(port is not None for port in tls):
            try:
                self.certificate = generate(self.host)
            except Exception as exc:
                ready.set_exception(exc)
                loop.close()
                return
        self.server = Server(
            self.broker,
            self.host,
            self._port,
            keys=self.config.keys,
            token_verifier=self.token_verifier,
            idle_timeout=self.config.idle_timeout,
            link_idle_timeout=self.config.link_idle_timeout,
            tls_port=self._tls_port,
            websocket_port=self._websocket_port,
            certificate=self.certificate,
            meter=self._meter,
        )
        if self.detach_every:
            every, condition = self.detach_every, self.detach_condition
            self._faults.append(
                loop.create_task(_every(every, lambda server: server.detach_links(condition=condition), self.server))
            )
        if self.promote_every:
            lose = self.promote_lose
            self._faults.append(
                loop.create_task(_every(self.promote_every, lambda server: _promote_all(server, lose), self.server))
            )
        if self.black_hole_every:
            hole = self.black_hole_seconds
            self._faults.append(
                loop.create_task(_every(self.black_hole_every, lambda server: server.black_hole(hole), self.server))
            )
        try:
            loop.run_until_complete(self.server.start())
            if self._registry_port is not None and self.certificate is not None:
                self.registry_server = RegistryServer(self.schema_registry, self.certificate.cert_file,
                                                      self.certificate.key_file, self.host, self._registry_port,
                                                      self.token_verifier)  # fmt: skip
        except Exception as exc:
            ready.set_exception(exc)
            loop.close()
            return
        if self.capturer is not None:
            try:
                self.capturer.start()
            except Exception as exc:
                ready.set_exception(exc)
                loop.run_until_complete(self.server.stop())
                loop.close()
                return
        ready.set_result(None)
        try:
            loop.run_forever()
        finally:
            for task in self._faults:  # the fault schedules end with the emulator
                task.cancel()
            self._faults.clear()
            loop.run_until_complete(self.server.stop())
            loop.close()

    def stop(self) -> None:
        if self.capturer is not None:
            self.capturer.stop()  # the open windows' files written, as a clean shutdown of the service would
        if self.registry_server is not None:
            self.registry_server.stop()
            self.registry_server = None
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=30)
        self._thread = None
        self._loop = None

    def __enter__(self) -> Emulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- addresses --
    @property
    def port(self) -> int:
        if self.server is None:
            raise RuntimeError("the emulator is not started: call start() first")
        return self.server.port

    @property
    def endpoint(self) -> str:
        return f"sb://{self.host}:{self.port}"

    @property
    def fully_qualified_namespace(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def client_host(self) -> str:
        """The host clients use: the listening address, or localhost when it listens on every address."""
        return "localhost" if self.host in ("0.0.0.0", "::", "") else self.host

    @property
    def tls_port(self) -> int:
        server = self._server()
        if server.tls_port is None:
            raise RuntimeError("the emulator serves no AMQPS: start it with tls_port=0 (or --tls-port)")
        return server.tls_port

    @property
    def websocket_port(self) -> int:
        server = self._server()
        if server.websocket_port is None:
            raise RuntimeError(
                "the emulator serves no WebSockets: start it with websocket_port=0 (or --websocket-port)"
            )
        return server.websocket_port

    @property
    def tls_endpoint(self) -> str:
        """The AMQPS listener, for the SDK's ``custom_endpoint_address`` (transport ``Amqp``)."""
        return f"sb://{self.client_host}:{self.tls_port}"

    @property
    def websocket_endpoint(self) -> str:
        """The WebSocket listener, for ``custom_endpoint_address`` (transport ``AmqpOverWebsocket``; the SDK
        adds the path ``/$servicebus/websocket``)."""
        return f"sb://{self.client_host}:{self.websocket_port}"

    @property
    def schema_registry_namespace(self) -> str:
        """What a Schema Registry client takes as the namespace (``SchemaRegistryClient(fully_qualified_namespace=
        ...)``): the registry's ``host:port``, trusted with :attr:`ca_file`."""
        if self.registry_server is None:
            raise RuntimeError("the emulator serves no Schema Registry: start it with schema_registry_port=0")
        return f"{self.client_host}:{self.registry_server.port}"

    def add_schema_group(self, name: str, schema_format: str = "Avro") -> None:
        """Create a schema group (as the portal does) holding Avro, Json or Custom schemas."""
        self.schema_registry.add_group(name, schema_format)

    @property
    def ca_file(self) -> str:
        """The certificate the TLS listeners present, for the SDK's ``connection_verify``."""
        if self.certificate is None:
            raise RuntimeError(
                "the emulator serves no TLS: start it with tls_port=0, websocket_port=0 or schema_registry_port=0"
            )
        return self.certificate.ca_file

    def connection_string(
        self, hub: str | None = None, key_name: str | None = None, key: str | None = None, tls: bool = False
    ) -> str:
        """A connection string the SDK accepts; with ``hub`` it carries ``EntityPath``.

        Plain AMQP by default (``UseDevelopmentEmulator=true``, the port in the endpoint). With ``tls``,
        the string a real namespace has: no port (TLS clients connect to 5671, or 443 for WebSockets),
        so they need :attr:`tls_endpoint` or :attr:`websocket_endpoint` as their custom endpoint unless
        the emulator listens on those ports."""
        if key_name is None:
            key_name = next(iter(self.config.keys), DEFAULT_KEY_NAME)
        if key is None:
            key = self.config.keys.get(key_name, DEFAULT_KEY)
        if tls:
            text = f"Endpoint=sb://{self.client_host};SharedAccessKeyName={key_name};SharedAccessKey={key}"
        else:
            text = (
                f"Endpoint={self.endpoint};SharedAccessKeyName={key_name};SharedAccessKey={key};"
                "UseDevelopmentEmulator=true"
            )
        if hub:
            text += f";EntityPath={hub}"
        return text

    # -- entity administration and fault controls (all thread-safe) --
    def _call(self, fn: Callable[[], T]) -> T:
        loop = self._loop
        if loop is None:
            return fn()
        if threading.current_thread() is self._thread:
            return fn()
        done: concurrent.futures.Future[T] = concurrent.futures.Future()

        def run() -> None:
            try:
                done.set_result(fn())
            except BaseException as exc:
                done.set_exception(exc)

        loop.call_soon_threadsafe(run)
        return done.result(timeout=30)

    def _server(self) -> Server:
        if self.server is None:
            raise RuntimeError("the emulator is not started: call start() first")
        return self.server

    def add_hub(
        self,
        name: str,
        partitions: int = 4,
        consumer_groups: tuple[str, ...] = (DEFAULT_CONSUMER_GROUP,),
        retention_seconds: float | None = None,
        geo_replicated: bool | None = None,
    ) -> None:
        """A hub; ``geo_replicated`` makes it a geo-replicated one (see :meth:`promote`; default: as the
        emulator's ``geo_replicated``)."""
        geo = self.geo_replicated if geo_replicated is None else geo_replicated
        self._call(lambda: self.broker.add_hub(name, partitions, consumer_groups, retention_seconds, geo))

    def promote(self, hub: str, lose: int | dict[str, int] = 0) -> dict[str, int]:
        """Promote a geo-replicated hub's secondary region: every partition begins a new replication segment,
        and every link of events is detached (the namespace now points at the other region). A forced
        promotion loses the events not yet replicated: ``lose`` of each partition (a count for all, or per
        partition id). Returns the events lost per partition."""

        return self._call(lambda: _promote(self._server(), self._hub(hub), lose))

    # -- Capture --
    def _capturer(self) -> Capturer:
        if self.capturer is None:
            raise RuntimeError("Capture is off: start the emulator with capture=CaptureSettings(...) (or --capture)")
        return self.capturer

    @property
    def captured_files(self) -> list[CapturedFile]:
        """The Capture files written so far, in the order written."""
        return list(self._capturer().files)

    def capture_flush(self) -> list[CapturedFile]:
        """Close every open Capture window now and write its file (its events, or an empty file)."""
        capturer = self._capturer()
        self._call(lambda: None)  # one turn of the loop: what was sent before this call is appended
        return capturer.flush()

    def capture_pause(self, hub: str) -> None:
        """Switch Capture off for ``hub`` until :meth:`capture_resume`: the events sent meanwhile are never
        captured, a real gap that only the hub (within its retention) can fill."""
        self._capturer().pause(hub)

    def capture_resume(self, hub: str) -> None:
        self._capturer().resume(hub)

    def capture_delay_next(self, hub: str, partition: str, seconds: float) -> None:
        """Write the next file of a partition ``seconds`` after its window closed (a back-fill after a storage
        outage): later files may appear before it."""
        self._capturer().delay_next(hub, partition, seconds)

    def capture_duplicate_next(self, hub: str, partition: str) -> None:
        """Write the next file of a partition twice, the copy named one second later: the same events in two
        files."""
        self._capturer().duplicate_next(hub, partition)

    def add_partitions(self, hub: str, count: int) -> None:
        """Grow a hub by ``count`` partitions (Premium and Dedicated tiers allow this at runtime)."""
        self._call(lambda: self._hub(hub).add_partitions(count))

    def add_consumer_group(self, hub: str, name: str) -> None:
        self._call(lambda: self._hub(hub).consumer_groups.add(name.lower()))

    def set_retention(self, hub: str, seconds: float | None) -> None:
        """Events older than ``seconds`` disappear (checked four times a second)."""

        def apply() -> None:
            self._hub(hub).retention_s = seconds
            self.broker.apply_retention()

        self._call(apply)

    def trim(self, hub: str, partition: str | int, up_to_sequence_number: int) -> int:
        """Remove the events below ``up_to_sequence_number``, as retention would; returns how many."""
        return self._call(lambda: self._partition(hub, partition).trim_before(up_to_sequence_number))

    def partition_properties(self, hub: str, partition: str | int) -> dict[str, Any]:
        return self._call(lambda: dict(self._partition(hub, partition).properties()))

    def drop_connections(self) -> int:
        """Abort every client connection at the TCP level; returns how many were open."""
        return self._call(lambda: self._server().drop_connections())

    def ping_websockets(self, payload: bytes = b"") -> int:
        """Send a WebSocket ping on every AMQP-over-WebSockets connection (clients answer with a pong);
        returns how many connections got one."""
        return self._call(lambda: self._server().ping_websockets(payload))

    def websocket_pongs(self) -> int:
        """Pongs the open WebSocket connections sent back (each answers a :meth:`ping_websockets`)."""
        return self._call(lambda: self._server().websocket_pongs())

    def detach_receivers(self, hub: str, partition: str | int) -> int:
        """Detach every receiver of one partition with a retriable ``amqp:link:detach-forced``."""
        return self._call(lambda: self._server().detach_receivers(hub, str(partition)))

    def stall(self, hub: str, partition: str | int, stalled: bool = True) -> None:
        """Stop (or resume) delivering one partition's events; sends and management still work."""

        def apply() -> None:
            p = self._partition(hub, partition)
            p.stalled = stalled
            if not stalled:
                self._server().wake(p)

        self._call(apply)

    def slow(self, hub: str, partition: str | int, delay_seconds: float) -> None:
        """Deliver one partition's events one at a time, ``delay_seconds`` apart (0 restores speed)."""

        def apply() -> None:
            p = self._partition(hub, partition)
            p.delay_s = max(0.0, delay_seconds)
            self._server().wake(p)

        self._call(apply)

    def detach_links(
        self, hub: str | None = None, *, receivers: bool = True, senders: bool = True,
        condition: str = "amqp:link:detach-forced",
    ) -> int:  # fmt: skip
        """Detach the receiving and/or sending links of events now (of one hub, or all), with ``condition``
        (``amqp:link:detach-forced`` or ``com.microsoft:timeout``, as the service does); how many."""
        return self._call(lambda: self._server().detach_links(hub, receivers, senders, condition))

    def black_hole(self, seconds: float | None = None) -> int:
        """Every open connection stops answering, without closing, for ``seconds`` (None: for good); new
        connections are served. How many connections it holed. When a hole heals, what the client sent into it
        is read, even if the client closed the connection meanwhile (a send it gave up on is stored then, as
        over a network that heals); a hole for good reads nothing more."""
        return self._call(lambda: self._server().black_hole(seconds))

    def black_hole_openings(self, count: int) -> None:
        """The next ``count`` connections made fall into a black hole for good as they open: accepted, then
        nothing is answered (no protocol header, no sign-in), nothing closed; later ones are served. What a
        client's opening of a connection must bound itself (a socket that blocks with no time-out waits for ever)."""

        def apply() -> None:
            self._server().holed_openings = count

        self._call(apply)

    def black_hole_sign_ins(self, count: int) -> None:
        """The next ``count`` connections to sign in (a CBS put-token) fall into a black hole for good right
        then: the opening was answered, the sign-in and everything after it are not, nothing is closed. What a
        client's wait for its sign-in must bound (the SDK waits ``auth_timeout``, 60 s unless told)."""

        def apply() -> None:
            self._server().holed_sign_ins = count

        self._call(apply)

    def set_throughput_units(
        self, units: int | None, burst_seconds: float | None = None, clock: Callable[[], float] | None = None
    ) -> None:
        """Scale the namespace now, as on the portal's Scale page (None: unmetered); the running totals
        start full. ``clock``: the allowances' clock (default: monotonic time), e.g. one held still so a test
        of the ingress rule does not depend on how fast the machine sends."""
        burst = self.burst_seconds if burst_seconds is None else burst_seconds
        # Meter refuses a count below 1
        meter = Meter(units, burst, clock or time.monotonic) if units is not None else None

        def apply() -> None:
            self._server().meter = meter

        self._call(apply)

    def lose_send_answers(self, hub: str, count: int = 1) -> None:
        """The next ``count`` sends to ``hub`` are stored, and then their answer is lost: each one's connection
        falls into a black hole for good before the disposition goes out, as when a connection dies right after
        the service stored a batch. A client that sends again without asking stores it twice."""

        def apply() -> None:
            self._server().lost_send_answers[hub.lower()] = count

        self._call(apply)

    def throttling(self) -> dict[str, float]:
        """The namespace's metering figures: sends refused (requests, events, bytes) and deliveries that
        waited for the egress allowance (times, seconds); empty when not metered."""

        def figures() -> dict[str, float]:
            meter = self._server().meter
            return meter.stats() if meter is not None else {}

        return self._call(figures)

    def fail_management_calls(self, count: int, status: int = 503) -> None:
        """Answer the next ``count`` management requests with ``status`` (503: server busy)."""

        def apply() -> None:
            server = self._server()
            server.failing_management_calls = count
            server.failing_status = status

        self._call(apply)

    def reject_management_calls(self, count: int) -> None:
        """Refuse the next ``count`` management requests at the link (a rejected disposition, no answer), as the
        service does with a request it cannot take."""

        def apply() -> None:
            self._server().rejecting_management_calls = count

        self._call(apply)

    def unsettled_management_answers(self, on: bool = True) -> None:
        """Send management answers unsettled (the client settles them: ``stats()["answers_settled_by_client"]``
        counts what it settled); the emulator's default is pre-settled."""

        def apply() -> None:
            self._server().unsettled_answers = on

        self._call(apply)

    def ignore_management_calls(self, count: int) -> None:
        """Leave the next ``count`` management requests unanswered (a request or reply lost on the way)."""

        def apply() -> None:
            self._server().unanswered_management_calls = count

        self._call(apply)

    def receiver_count(self, hub: str, partition: str | int, consumer_group: str = DEFAULT_CONSUMER_GROUP) -> int:
        """How many receivers are attached to one partition in one consumer group (for tests)."""
        key = (hub.lower(), consumer_group.lower(), str(partition))
        return self._call(lambda: sum(1 for r in self._server().receivers.get(key, []) if not r.detached))

    def consumer_attaches(self, hub: str, consumer_group: str = DEFAULT_CONSUMER_GROUP) -> dict[str, int]:
        """Receiving links attached so far to each partition of a hub in one consumer group."""
        prefix = (hub.lower(), consumer_group.lower())
        return self._call(lambda: {k[2]: n for k, n in self._server().consumer_attaches.items() if k[:2] == prefix})

    def events_sent(self, hub: str) -> int:
        """Events the hub has sent to receivers so far, every consumer group (what a namespace meters as egress)."""
        return self._call(lambda: self._server().events_out_by_hub.get(hub.lower(), 0))

    def consumer_connections(self, hub: str) -> int:
        """How many client connections hold receiving links on a hub now (for tests of connection sharing)."""

        def count() -> int:
            links = [r for k, rs in self._server().receivers.items() if k[0] == hub.lower() for r in rs]
            return len({id(r.session.conn) for r in links if not r.detached})

        return self._call(count)

    def stored_sends(self, hub: str | None = None) -> list[dict[str, Any]]:
        """The sends the emulator stored (the last 100,000), oldest first, of one hub or all: each with its
        ``connection`` (numbered from 1 as clients connected), ``hub``, ``partition``, ``first`` sequence number,
        ``count`` of events and ``client_let_go``: the client let go of that link with this as its last send (not
        after a detach of the emulator's), so it may never have seen it accepted and sending it again is a repeat
        that delivery at least once allows; any other repeat had no such reason."""

        def sends() -> list[dict[str, Any]]:
            return [dataclasses.asdict(s) for s in self._server().sends
                    if hub is None or s.hub.lower() == hub.lower()]  # fmt: skip

        return self._call(sends)

    def stats(self) -> dict[str, int]:
        return self._call(lambda: dict(self._server().stats, connections=len(self._server().connections)))

    def _hub(self, name: str) -> Any:
        hub = self.broker.hub(name)
        if hub is None:
            raise KeyError(f"no hub named {name!r}; hubs: {sorted(h.name for h in self.broker.hubs.values())}")
        return hub

    def _partition(self, hub: str, partition: str | int) -> Any:
        p = self._hub(hub).partition(str(partition))
        if p is None:
            raise KeyError(f"hub {hub!r} has no partition {partition!r}")
        return p


def _promote(server: Server, hub: Any, lose: int | dict[str, int]) -> dict[str, int]:
    """Promote one hub (on the emulator's loop): a new segment in every partition, links detached."""
    lost = {p.id: p.promote(lose.get(p.id, 0) if isinstance(lose, dict) else lose) for p in hub.partitions}
    server.detach_links(hub=hub.name, condition="amqp:link:detach-forced",
                        description="The namespace's secondary region was promoted.")  # fmt: skip
    return lost


def _promote_all(server: Server, lose: int) -> None:
    """The ``promote_every`` schedule: every geo-replicated hub is promoted."""
    for hub in list(server.broker.hubs.values()):
        if hub.geo_replicated:
            _promote(server, hub, lose)


async def _every(seconds: float, action: Callable[[Server], Any], server: Server) -> None:
    """Run ``action(server)`` every ``seconds`` on the emulator's loop (a fault schedule)."""
    while True:
        await asyncio.sleep(seconds)
        try:
            action(server)
        except Exception:  # a fault schedule must never stop the emulator
            _LOG.exception("a scheduled fault failed")
