"""``eventhubs-spark send``: events from a file, standard input or generated, dealt over a hub's partitions.

Each batch is sent once and retried here, so a repeat after a send that went unanswered is known and said.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import sys
import time
from collections.abc import Iterator
from typing import Any, TextIO

from eventhubs_spark.cli.inputs import secret


# -- send --------------------------------------------------------------------------------------------
def _bodies(args: argparse.Namespace) -> tuple[int | None, Iterator[str]]:
    if args.file:
        handle: TextIO = sys.stdin if args.file == "-" else open(args.file, encoding="utf-8")  # noqa: SIM115
        count = None
        if handle is not sys.stdin:
            count = sum(1 for line in handle if line.strip())
            handle.seek(0)
        return count, (line.rstrip("\n") for line in handle if line.strip())

    def generated() -> Iterator[str]:
        # readings as the docs' examples parse them (the example pipeline's device, temperature and ts), padded to
        # about --size bytes
        for i in range(args.count):
            reading = {"id": i, "device": f"device-{i % 8}", "temperature": round(20 + (i % 100) / 10, 1),
                       "ts": now_iso()}  # fmt: skip
            yield json.dumps({**reading, "pad": "x" * max(0, args.size - len(json.dumps(reading)) - 10)})

    return args.count, generated()


def now_iso() -> str:
    """Now, as ISO 8601 text in UTC (what to_timestamp and a JSON schema's timestamp read)."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _progress(done: int, total: int | None, out: TextIO) -> None:
    if total:
        filled = int(30 * done / total)
        out.write(f"\r[{'#' * filled}{'.' * (30 - filled)}] {done}/{total}")
    else:
        out.write(f"\r{done} events")
    out.flush()


def run_send(args: argparse.Namespace) -> int:
    from azure.eventhub import EventData, EventHubProducerClient

    from eventhubs_spark.auth.settings import parse_connection_string
    from eventhubs_spark.errors import EventHubsError
    from eventhubs_spark.process import runtime

    conn = secret(args.connection_string, "EVENTHUBS_CONNECTION_STRING", "--connection-string")
    if not args.send_timeout > 0:
        print(f"error: --send-timeout must be more than 0 seconds (e.g. --send-timeout 30), not {args.send_timeout:g}",
              file=sys.stderr)  # fmt: skip
        return 2
    try:
        # One management call without the SDK's retries first: a wrong hub name or key is answered at
        # once, in one line, instead of after the producer's retries and a traceback.
        settings = parse_connection_string(conn, option="--connection-string", hub=args.hub, hub_option="--hub")
        partition_ids = runtime.current().management(settings, 30.0).partition_ids()
    except EventHubsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    total, bodies = _bodies(args)
    options: dict[str, Any] = {}
    if args.partition is not None:
        options["partition_id"] = args.partition
    if args.partition_key is not None:
        options["partition_key"] = args.partition_key
    started = time.monotonic()
    sender = _Sender(lambda: EventHubProducerClient.from_connection_string(conn, eventhub_name=settings.hub,
                                                                         retry_total=0),
                     args.send_timeout, partition_ids)  # fmt: skip
    # Neither a partition nor a key: the events are dealt over the partitions one by one, as the sink does (a
    # batch sent without either lands on one partition the service picks: all of a small run on one partition).
    targets = [options] if options else [{"partition_id": p} for p in partition_ids]
    try:
        batches = [sender.create_batch(target) for target in targets]
        for i, body in enumerate(bodies):
            slot = i % len(targets)
            event = EventData(body)
            try:
                batches[slot].add(event)
            except ValueError:
                sender.send(batches[slot])
                _progress(sender.sent, total, sys.stderr)
                batches[slot] = sender.create_batch(targets[slot])
                batches[slot].add(event)
        for batch in batches:
            if len(batch):
                sender.send(batch)
    except _SendFailed as exc:
        print(f"\nerror: {exc}", file=sys.stderr)
        return 1
    finally:
        sender.close()
    _progress(sender.sent, total, sys.stderr)
    elapsed = time.monotonic() - started
    print(f"\nsent {sender.sent} events in {elapsed:.1f} s", file=sys.stderr)
    if sender.resent:
        print(f"warning: {sender.resent} of them were sent again after a send that went unanswered for "
              f"{args.send_timeout:g} s, which may have been stored all the same: the hub may hold those twice",
              file=sys.stderr)  # fmt: skip
    return 0


class _SendFailed(Exception):
    pass


class _Sender:
    """The ``send`` command's producer: each batch is sent with
    :func:`~eventhubs_spark.amqp.sdk.send_once` and retried here, so a repeat is known and said.
    (``send_batch`` sends a batch a second time after any failure, silently; after a send that timed out, the first
    copy may have been stored all the same.) A send that goes unanswered
    moves to a new connection, as a black-holed one would answer nothing more.

    As the sink's lanes do, every partition's link is on one connection, opened without the SDK's pauses between
    the steps of opening, and the client is told the hub's partitions the command already asked for: through the
    SDK's own paths each partition's first send opened a connection (and a 50 ms pause a step), and the client
    asked the partitions over another."""

    ATTEMPTS = 3
    BUSY_WAIT = 4.0  # seconds between sends the service refused as busy (the SDKs' own wait for server-busy)
    BUSY_PATIENCE = 120.0  # seconds a batch is sent again while the service says it is busy, before failing

    def __init__(self, new_client: Any, timeout: float, partition_ids: list[str]) -> None:
        self.new_client = new_client
        self.timeout = timeout
        self.partition_ids = partition_ids
        self._renew()
        self.sent = 0  # events stored (acknowledged)
        self.resent = 0  # of them, sent again after an unanswered send

    def _renew(self) -> None:
        from eventhubs_spark.amqp import sdk

        self.client = self.new_client()
        self.shared = sdk.share_send_connection(self.client)
        sdk.know_partitions(self.client, self.partition_ids)

    def create_batch(self, target: dict[str, Any]) -> Any:
        from eventhubs_spark.amqp import sdk

        return sdk.create_batch(self.client, self.shared, timeout=self.timeout, **target)

    def send(self, batch: Any) -> None:
        from azure.eventhub.exceptions import EventHubError, OperationTimeoutError

        from eventhubs_spark.amqp import conditions, sdk

        unanswered = False
        attempt = 0
        busy_until = time.monotonic() + self.BUSY_PATIENCE
        while True:
            try:
                sdk.send_once(self.client, batch, self.timeout, self.shared)
                break
            except (EventHubError, TimeoutError) as exc:
                timed_out = isinstance(exc, OperationTimeoutError | TimeoutError)
                unanswered = unanswered or timed_out
                if conditions.condition(exc) == conditions.SERVER_BUSY and time.monotonic() < busy_until:
                    # throttled (past the namespace's throughput units): nothing stored; wait as the SDKs do, and
                    # count no attempt
                    time.sleep(self.BUSY_WAIT)
                    continue
                attempt += 1
                if attempt == self.ATTEMPTS:
                    first = self.sent + 1
                    doubt = ("an attempt went unanswered, so the hub may hold them all the same: look before sending "
                             "them again" if unanswered else "each attempt was refused or failed")  # fmt: skip
                    raise _SendFailed(f"events {first}-{first + len(batch) - 1} were not acknowledged after {attempt} "
                                      f"attempts ({doubt}): {exc}. The {self.sent} events before them were "
                                      "sent.") from exc  # fmt: skip
                if timed_out:  # a new connection: the old one may be a black hole
                    self.close()
                    self._renew()
                else:
                    time.sleep(attempt)  # refused (busy, a detach): nothing stored; a moment, then again
        self.sent += len(batch)
        if unanswered:
            self.resent += len(batch)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.client.close()
