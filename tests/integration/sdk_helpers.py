"""Small wrappers over the official SDK for tests: send, and receive until a count or a deadline."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from azure.eventhub import EventData, EventHubConsumerClient, EventHubProducerClient


def send(conn: str, bodies: list[bytes | str], **batch_options: Any) -> None:
    """Send ``bodies`` in as few batches as the size limit allows, with the batch options given."""
    with EventHubProducerClient.from_connection_string(conn) as producer:
        batch = producer.create_batch(**batch_options)
        for body in bodies:
            event = EventData(body)
            try:
                batch.add(event)
            except ValueError:
                producer.send_batch(batch)
                batch = producer.create_batch(**batch_options)
                batch.add(event)
        if len(batch):
            producer.send_batch(batch)


@dataclass
class Received:
    events: list[Any] = field(default_factory=list)
    errors: list[BaseException] = field(default_factory=list)
    started: threading.Event = field(default_factory=threading.Event)


class Receiver:
    """Runs ``EventHubConsumerClient.receive_batch`` on a thread, collecting events and errors."""

    def __init__(
        self, conn: str, consumer_group: str = "$Default", client_options: dict[str, Any] | None = None,
        **receive_options: Any,
    ) -> None:  # fmt: skip
        self.client = EventHubConsumerClient.from_connection_string(
            conn, consumer_group=consumer_group, **(client_options or {})
        )
        self.result = Received()
        self._lock = threading.Lock()
        options = {"max_wait_time": 0.2, "max_batch_size": 1000, **receive_options}
        self.thread = threading.Thread(
            target=self.client.receive_batch,
            kwargs={"on_event_batch": self._on_batch, "on_error": self._on_error, **options},
            daemon=True,
        )
        self.thread.start()

    def _on_batch(self, ctx: Any, events: list[Any]) -> None:
        self.result.started.set()
        with self._lock:
            self.result.events.extend(events)

    def _on_error(self, ctx: Any, error: BaseException) -> None:
        with self._lock:
            self.result.errors.append(error)

    def wait_for(self, count: int, timeout: float = 30.0) -> list[Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if len(self.result.events) >= count:
                    break
            time.sleep(0.02)
        with self._lock:
            return list(self.result.events)

    def wait_for_error(self, timeout: float = 20.0) -> BaseException:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if self.result.errors:
                    return self.result.errors[0]
            time.sleep(0.02)
        raise AssertionError("no error reached on_error in time")

    def close(self) -> None:
        self.client.close()
        self.thread.join(timeout=30)

    def __enter__(self) -> Receiver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class LiveProducer:
    """Sends one event every 50 ms to a random partition, on a thread, from start() until stop().

    Bodies are ``live-<partition>-<n>``; ``stop()`` returns every body sent (and may be called twice).
    """

    def __init__(self, conn: str, partitions: int, seed: int) -> None:
        self.conn, self.partitions, self.seed = conn, partitions, seed
        self.produced: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        import itertools
        import random

        rng = random.Random(self.seed)
        for i in itertools.count():
            if self._stop.wait(0.05):
                return
            p = rng.randrange(self.partitions)
            body = f"live-{p}-{i}"
            send(self.conn, [body], partition_id=str(p))
            self.produced.append(body)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> list[str]:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10)
        return list(self.produced)


def receive(
    conn: str, count: int, timeout: float = 30.0, client_options: dict[str, Any] | None = None, **options: Any
) -> list[Any]:
    """Receive at least ``count`` events (or whatever came before ``timeout``) and stop; ``client_options``
    go to the consumer client (transport, custom endpoint...)."""
    with Receiver(conn, client_options=client_options, **options) as r:
        return r.wait_for(count, timeout)


def receive_partition(conn: str, partition: str, count: int, timeout: float = 60.0) -> list[Any]:
    """The first ``count`` events of one partition as the official SDK reads them, each once, in sequence order.

    Where links are detached meanwhile (the emulator's ``detach_every``, as the service does), the SDK's consumer
    hands events out again: it reopens its link after the last event it handed out but keeps what it had already
    buffered (``EventHubConsumer._message_buffer``), so a batch read back that way holds repeats the hub does not.
    Kept here by sequence number: what the hub stores, which is what a test of a writer counts."""
    by_seq: dict[int, Any] = {}
    deadline = time.monotonic() + timeout
    with Receiver(conn, partition_id=partition, starting_position="-1") as r:
        while time.monotonic() < deadline:
            with r._lock:
                events = list(r.result.events)
            by_seq = {e.sequence_number: e for e in events}
            if all(seq in by_seq for seq in range(count)):
                break
            time.sleep(0.05)
    return [by_seq[seq] for seq in sorted(by_seq)]


def wait_until(predicate: Any, timeout: float = 20.0, message: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {message}")


def attach_error(conn: str, partition: str, consumer_group: str = "$Default", **consumer_options: Any) -> str:
    """The error the server detached a new receiver link with.

    The SDK's ``receive`` retries attach errors such as ``amqp:not-found`` forever without calling
    ``on_error`` (each ``receive()`` call restarts its retry count), so the only place the server's
    answer is visible is the link itself: drive a consumer by hand and read it there.
    """
    client = EventHubConsumerClient.from_connection_string(conn, consumer_group=consumer_group)
    consumer = client._create_consumer(
        consumer_group, partition, "-1", on_event_received=lambda _e: None, **consumer_options
    )
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                consumer.receive(batch=True, max_batch_size=10, max_wait_time=0.2)
            except Exception as exc:  # link:stolen is raised, not retried
                return str(exc)
            handler = consumer._handler
            link = handler._link if handler is not None else None
            if link is not None and link._error is not None:
                return str(link._error)
        raise AssertionError("the receiver link was not detached with an error")
    finally:
        consumer.close()
        client.close()
