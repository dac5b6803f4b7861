"""The cached management client: hub and partition properties over one AMQP connection, concurrently.

The SDK opens a new connection, session and CBS exchange for every management call (0.1 to 0.5 s
each), so a trigger that asks about 32 partitions one after another spends seconds planning. Here one
connection per (namespace, hub, credentials) stays open in the process, on a private event loop, and
all partitions are asked at once on it, pipelined.

Why it is built so: the design notes in docs/pages/architecture.md.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

from eventhubs_spark.amqp import failures, sdk
from eventhubs_spark.amqp.management_pipe import ManagementPipe
from eventhubs_spark.amqp.messages import Unsupported
from eventhubs_spark.auth.settings import ConnectionSettings
from eventhubs_spark.errors import EventHubsError, TransientError
from eventhubs_spark.positions import geo_segments
from eventhubs_spark.positions.partition_catalog import PartitionInfo

_LOG = logging.getLogger(__name__)
T = TypeVar("T")


class _LoopThread:
    """One event loop on a daemon thread per process, shared by every management client."""

    _lock = threading.Lock()
    _loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    def run(cls, coro: Coroutine[Any, Any, T], timeout: float) -> T:
        with cls._lock:
            if cls._loop is None or not cls._loop.is_running():
                loop = asyncio.new_event_loop()
                loop.set_exception_handler(_quiet_unclosed_sessions)
                ready = threading.Event()

                def main() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(ready.set)
                    loop.run_forever()

                threading.Thread(target=main, name="eventhubs-management", daemon=True).start()
                ready.wait(10)
                cls._loop = loop
            loop = cls._loop
        future: Future[T] = asyncio.run_coroutine_threadsafe(coro, loop)
        try:
            return future.result(timeout=timeout)
        except TimeoutError:
            future.cancel()
            raise


def _quiet_unclosed_sessions(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """The SDK's async WebSocket transport leaves its aiohttp session open when a connection attempt
    fails (a refused proxy, say); aiohttp then prints "Unclosed client session" when it is collected.
    The failure itself is reported as a :class:`~eventhubs_spark.errors.NetworkError`: the leftover
    session is logged at debug level only."""
    if str(context.get("message", "")).startswith(("Unclosed client session", "Unclosed connector")):
        _LOG.debug("%s (left by a failed WebSocket connection attempt)", context.get("message"))
        return
    loop.default_exception_handler(context)


_ATTEMPT_TIMEOUT = 30.0
# Requests unanswered at once on the management link, and never more than the credit the service granted: past a
# few dozen the two ends' CPU bounds a call, not round trips, so more in flight gains nothing (bench `planning`).
_IN_FLIGHT = 64
_TOKEN_MARGIN = 60.0  # seconds before its expiry a request token is made anew


class ManagementClient:
    """Hub and partition properties for one hub, over a connection kept open between calls (the
    readers' :class:`~eventhubs_spark.positions.partition_catalog.PartitionMetadata`)."""

    def __init__(self, settings: ConnectionSettings, operation_timeout: float = 300.0) -> None:
        self.settings = settings
        self.operation_timeout = operation_timeout
        self._client: Any = None
        self._mgmt: Any = None
        self._auth: Any = None
        self._open_lock: asyncio.Lock | None = None
        self._cached_token: tuple[Any, float] | None = None  # (token, when it expires): see _token
        self._lock: asyncio.Lock | None = None
        # the connection's pipe (False: the SDK's path, the pipe cannot run on it), None until its first request
        self._pipe: ManagementPipe | bool | None = None
        self.pipelined = True  # False: every request through the SDK (the A/B of bench planning, tests)
        self.calls = 0
        self._in_flight = 0
        self.most_in_flight = 0  # requests unanswered at once, the most seen (for tests and benchmarks)
        self.credit_renewals = 0  # times the response link was given credit again (for tests)
        self.granted_credit: int | None = None  # the request link's credit left before the last call, once known

    # -- public, synchronous --
    def partition_ids(self) -> list[str]:
        """The hub's partition ids. Safe beside a :meth:`partition_properties` call on another thread (a running
        stream lists partitions in the background: ``PartitionCatalog.listed``): one call at a time uses the
        connection."""
        props = self._run(self._hub_properties)
        return [p.decode() if isinstance(p, bytes) else str(p) for p in props[b"partition_ids"]]

    async def _hub_properties(self) -> Any:
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:  # the pipe of a properties call reads the frames the SDK would read for this one
            return await self._request({"name": self.settings.hub}, "com.microsoft:eventhub")

    def partition_properties(self, partition_ids: list[str]) -> dict[str, PartitionInfo]:
        """Properties of all ``partition_ids``, requested concurrently on one connection."""
        replies = self._run(lambda: self._all_partitions(partition_ids))
        return {pid: _partition_info(pid, reply) for pid, reply in zip(partition_ids, replies, strict=True)}

    async def _all_partitions(self, partition_ids: list[str]) -> list[Any]:
        """Every partition's answer: the first request of a connection through the SDK (which attaches the
        ``$management`` links), the others pipelined on those links by a
        :class:`~eventhubs_spark.amqp.management_pipe.ManagementPipe` (the SDK's path where the pipe cannot run)."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:  # one call at a time reads the connection: the pipe takes frames the SDK would
            rest = list(partition_ids)
            first: list[Any] = []
            if self._pipe is None and rest:
                first = [await self._request(self._partition(rest[0]), "com.microsoft:partition")]
                rest = rest[1:]
                pipe = ManagementPipe.of(self._mgmt) if self.pipelined else None
                if pipe is None and self.pipelined:
                    _LOG.info("management requests for %s go through the SDK: its links lack what the pipe uses "
                              "(sdk.MANAGEMENT_INTERNALS)", self.settings.hub)  # fmt: skip
                self._pipe = pipe if pipe is not None else False
            if not rest:
                return first
            if isinstance(self._pipe, ManagementPipe):
                try:
                    return first + await self._through_pipe(self._pipe, rest)
                except Unsupported as exc:  # said before anything was sent: a token too large for a frame, say
                    _LOG.info("management requests for %s go through the SDK: %s", self.settings.hub, exc)
                    self._pipe = False
            return first + await self._through_sdk(rest)

    def _partition(self, pid: str) -> dict[str, str]:
        return {"name": self.settings.hub, "partition": pid}

    async def _through_pipe(self, pipe: ManagementPipe, partition_ids: list[str]) -> list[Any]:
        try:
            await self._ensure_open()
            await _signed_in(self._mgmt)  # the connection's sign-in renewed near its expiry, as every SDK request does
            window = self._window()
            token = await self._token()
            shared = {
                "name": self.settings.hub,
                # a string, as the SDK sends it (its tokens are str; bytes would be sent as their text too)
                "security_token": token.decode("utf-8") if isinstance(token, bytes) else str(token),
                "operation": "READ",
                "type": "com.microsoft:partition",
            }
            self.calls += len(partition_ids)
            replies = await pipe.ask(shared, partition_ids, window)
        except (EventHubsError, asyncio.CancelledError, Unsupported):
            raise
        except Exception as exc:
            raise TransientError(f"{type(exc).__name__}: {exc}") from exc
        finally:
            self.most_in_flight = max(self.most_in_flight, pipe.most_in_flight)
            self.credit_renewals = max(self.credit_renewals, pipe.credit_renewals)
        return [self._answer(self._partition(pid), r.status, r.description, r.body)
                for pid, r in zip(partition_ids, replies, strict=True)]  # fmt: skip

    async def _through_sdk(self, partition_ids: list[str]) -> list[Any]:
        # At most _IN_FLIGHT requests (and never more than the credit the service granted the request link)
        # are unanswered at once: the SDK's request link does not wait for credit when it runs out (it grants
        # itself more), so 1,024 requests at once went past what the service takes, and each reuse of the
        # connection got slower (3.6 s, 10.9 s, 23.6 s, 31.6 s at 1,024 partitions, with requests repeated).
        window = asyncio.Semaphore(self._window())

        async def one(pid: str) -> Any:
            async with window:
                self._in_flight += 1
                self.most_in_flight = max(self.most_in_flight, self._in_flight)
                try:
                    return await self._request(self._partition(pid), "com.microsoft:partition")
                finally:
                    self._in_flight -= 1

        return await asyncio.gather(*(one(pid) for pid in partition_ids))

    def _window(self) -> int:
        """How many requests may be unanswered at once: at most ``_IN_FLIGHT``, and at most the credit the
        service has granted the request link and not used up (read before a call sends anything)."""
        credit = sdk.management_credit(self._mgmt) if self._mgmt is not None else None
        if credit is not None:
            self.granted_credit = credit
        return max(1, min(_IN_FLIGHT, credit if credit is not None else _IN_FLIGHT))

    def close(self) -> None:
        try:
            _LoopThread.run(self._close(), timeout=30)
        except Exception:  # closing is best effort
            _LOG.debug("closing the management client failed", exc_info=True)

    # -- internals --
    def _run(self, make: Callable[[], Awaitable[T]]) -> T:
        """Run ``make()`` with retries of transient failures until the operation timeout.

        One attempt gets a third of the deadline (at most 30 s): a request that is never answered, or a
        connection dropped mid-handshake, is retried on a new connection instead of using up the whole
        deadline.
        """

        def attempt(seconds: float) -> T:
            return _LoopThread.run(self._with_timeout(make, seconds), timeout=seconds + 5)

        def reconnect(tries: int, error: BaseException) -> None:
            # The cached connection may have been closed by the service while it sat idle between
            # triggers (its idle time-out): reconnecting once is routine; more is worth a warning.
            _LOG.log(
                logging.INFO if tries == 1 else logging.WARNING,
                "management request for %s/%s failed (attempt %d), reconnecting: %s",
                self.settings.namespace,
                self.settings.hub,
                tries,
                " ".join(str(error).split()),
            )
            _LoopThread.run(self._close(), timeout=30)

        return self.settings.retry.call(
            attempt,
            timeout=self.operation_timeout,
            what=f"management request for hub {self.settings.hub!r} on {self.settings.namespace}",
            on_retry=reconnect,
            is_retriable=failures.give_up_early(self.settings),  # a wrong host or port: said within seconds
            attempt_share=1 / 3,
            # a live connection shows a frame within its idle time-out: a request unanswered for that long went
            # into a black hole, and is made again on a new connection (bench pushback)
            max_attempt=min(_ATTEMPT_TIMEOUT, self.settings.network.idle_timeout or _ATTEMPT_TIMEOUT),
        )

    async def _with_timeout(self, make: Callable[[], Awaitable[T]], timeout: float) -> T:
        return await asyncio.wait_for(make(), timeout)

    async def _ensure_open(self) -> None:
        if self._open_lock is None:
            self._open_lock = asyncio.Lock()
        async with self._open_lock:
            if self._mgmt is not None:
                return
            client = self.settings.async_producer(retry_total=0)
            auth, mgmt = await sdk.open_management(client)
            await _signed_in(mgmt)
            self._client, self._auth, self._mgmt = client, auth, mgmt

    async def _token(self) -> Any:
        """The token every request carries (``security_token``), made once and kept until a minute before it
        expires: the SDK's ``get_token`` signs a new one on every call (an HMAC and a URL encoding, about a third
        of a millisecond), which was a request's largest cost when a trigger asks 100 partitions at once."""
        now = time.time()
        if self._cached_token is None or self._cached_token[1] - now < _TOKEN_MARGIN:
            token = await self._auth.get_token()
            expires = float(getattr(token, "expires_on", 0) or 0)
            self._cached_token = (token.token, expires if expires > now else now + _TOKEN_MARGIN)
            return token.token
        return self._cached_token[0]

    async def _close(self) -> None:
        mgmt, client = self._mgmt, self._client
        self._mgmt = self._client = self._auth = None
        self._pipe = None
        self._cached_token = None
        if mgmt is not None:
            try:
                await mgmt.close_async()
            except Exception:
                _LOG.debug("closing the management link failed", exc_info=True)
        if client is not None:
            try:
                await client.close()
            except Exception:
                _LOG.debug("closing the management client failed", exc_info=True)

    async def _request(self, properties: dict[str, str], operation_type: str) -> Any:
        try:
            await self._ensure_open()
            failures.reached(self.settings)
            client, mgmt = self._client, self._mgmt
            # answers need credit on the kept response link, which the SDK grants once (at most _IN_FLIGHT are
            # unanswered at a time, so that many left is enough)
            if await sdk.keep_management_answers_coming(mgmt, 2 * _IN_FLIGHT):
                self.credit_renewals += 1
            message = sdk.management_message(client, properties)
            message.application_properties["security_token"] = await self._token()
            self.calls += 1
            status, description, response = await mgmt.mgmt_request_async(
                message,
                operation="READ",
                operation_type=operation_type,
                node=b"$management",
                status_code_field=b"status-code",
                description_fields=b"status-description",
            )
        except (EventHubsError, asyncio.CancelledError):
            raise
        except Exception as exc:
            with failures.sign_in_errors(self.settings):  # a refused sign-in is not transient: it fails at once
                raise TransientError(f"{type(exc).__name__}: {exc}") from exc
        return self._answer(properties, int(status), description, response.value)

    def _answer(self, properties: dict[str, str], status: int, description: Any, body: Any) -> Any:
        """A request's body, or the error its status says."""
        if isinstance(description, bytes):
            description = description.decode("utf-8", "replace")
        if status < 400:
            return body
        if status == 401:
            raise failures.auth_error(self.settings, f"management request refused with status 401: {description}")
        if status == 404:
            raise failures.not_found(self.settings, f"management request answered 404: {description}")
        error_cls = TransientError if status >= 500 or status in (408, 429) else EventHubsError
        raise error_cls(f"management request {properties} failed with status {status}: {description}")


async def _signed_in(mgmt: Any) -> None:
    """Wait until the management client's connection is signed in (``client_ready_async``), which also renews its
    token when it nears its expiry: the SDK does this before each of its own requests; the pipe's requests do not
    pass through the SDK, so each call does it once.

    Each look reads at most a frame of what has arrived, without waiting for more, so the pause between looks is
    the wait for each of the sign-in's frames: it starts at half a millisecond and doubles up to 2 ms (at most 500
    looks a second, each a few microseconds, while a sign-in waits). A fixed 10 ms pause made a sign-in take 73 ms
    on the emulator, which answers each step in well under a millisecond (14 ms now): most of a query's first
    lookup, which opens the connection (a query's first trigger)."""
    pause = 0.0005
    while not await mgmt.client_ready_async():
        await asyncio.sleep(pause)
        pause = min(2 * pause, 0.002)


def _partition_info(pid: str, reply: Any) -> PartitionInfo:
    def text(value: Any) -> str:
        return value.decode("utf-8") if isinstance(value, bytes) else str(value)

    ms = reply.get(b"last_enqueued_time_utc")
    when = dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc) if ms else None
    offset = text(reply[b"last_enqueued_offset"])
    # as the service names them, else from a geo-replicated offset's prefix (-1: not geo-replicated)
    last_segment = _segment(reply.get(b"last_enqueued_replication_segment"), geo_segments.of_offset(offset))
    begin_segment = _segment(reply.get(b"begin_replication_segment"), last_segment)
    return PartitionInfo(
        id=pid,
        beginning_sequence_number=geo_segments.pack(begin_segment, int(reply[b"begin_sequence_number"])),
        last_enqueued_sequence_number=geo_segments.pack(last_segment, int(reply[b"last_enqueued_sequence_number"])),
        last_enqueued_offset=offset,
        last_enqueued_time=when,
        is_empty=bool(reply[b"is_partition_empty"]),
    )


def _segment(value: Any, default: int) -> int:
    """A replication segment the service named in partition properties, else ``default``."""
    return value if isinstance(value, int) and value >= 0 else default
