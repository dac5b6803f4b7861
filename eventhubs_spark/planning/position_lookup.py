"""Driver side: translate starting and ending positions into sequence numbers, all partitions at once.

A position names one event (see :mod:`eventhubs_spark.positions.event_positions`): a start reads from it, an end
stops before it, so starts and ends translate the same way. Earliest, latest and sequence numbers come from
partition properties. An offset or an enqueued time has no management call to translate it, so a short-lived
receiver reads the first event its filter selects (concurrently for every partition that needs one); a position past
the last event means the partition's end. Those receivers are links on the process's one connection to the
namespace, all attached at once (one receiver of its own each only for what that could not find).

Why it is built so: the design notes in docs/pages/architecture.md.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from eventhubs_spark.amqp import conditions, failures, sdk
from eventhubs_spark.auth.settings import ConnectionSettings
from eventhubs_spark.errors import EventHubsTimeoutError
from eventhubs_spark.interprocess.task_ranges import ReceiverConfig
from eventhubs_spark.positions import geo_segments
from eventhubs_spark.positions.event_positions import (
    Earliest,
    EnqueuedTime,
    Latest,
    Offset,
    Position,
    SequenceNumber,
    selector,
)
from eventhubs_spark.positions.partition_catalog import PartitionInfo

_LOG = logging.getLogger(__name__)


def resolve(
    settings: ConnectionSettings,
    config: ReceiverConfig,
    infos: dict[str, PartitionInfo],
    positions: dict[str, Position],
    timeout: float,
) -> dict[str, int]:
    """Sequence number of the event each position names, per partition (a start's first event read,
    an end's first event not read)."""
    out: dict[str, int] = {}
    lookups: dict[str, Offset | EnqueuedTime] = {}
    for pid, pos in positions.items():
        info = infos[pid]
        if isinstance(pos, Earliest):
            out[pid] = info.end if info.is_empty else info.beginning_sequence_number
        elif isinstance(pos, Latest):
            out[pid] = info.end
        elif isinstance(pos, SequenceNumber):
            out[pid] = pos.first()  # may lie past the end: reading starts when the partition gets there
            segment = geo_segments.segment_of(info.end)
            if segment >= 0 and geo_segments.segment_of(out[pid]) < 0:
                # a bare sequence number on a geo-replicated hub: in the partition's last replication segment,
                # as the service reads a filter without one (a checkpoint's position carries its own)
                out[pid] = geo_segments.pack(segment, out[pid])
        elif _past_end(pos, info):
            out[pid] = info.end
        else:
            lookups[pid] = pos  # an offset or an enqueued time
    if len(lookups) > 1:  # one partition: one lookup, its own receiver as ever (its errors as they were)
        out.update(_first_positions(settings, config, lookups, timeout))
        lookups = {pid: pos for pid, pos in lookups.items() if pid not in out}
    if lookups:  # one partition, or what the shared connection could not find: a receiver each
        with ThreadPoolExecutor(max_workers=min(16, len(lookups))) as pool:
            found = pool.map(
                lambda item: (item[0], _first_sequence(settings, config, item[0], item[1], timeout)),
                lookups.items(),
            )
            for pid, seq in found:
                out[pid] = infos[pid].end if seq is None else seq
    return out


def _first_positions(
    settings: ConnectionSettings, config: ReceiverConfig, lookups: dict[str, Offset | EnqueuedTime], timeout: float
) -> dict[str, int]:
    """The position of the first event each of ``lookups`` selects, read over the process's one shared connection
    to the namespace (:mod:`eventhubs_spark.amqp.receive_connections`): a link a partition, all attached at once,
    each given credit for one event. A receiver each, as before, cost a connection a partition, 16 at a time:
    6.6 s to start a 1,024-partition stream at an enqueued time on the emulator, and on a real namespace a TLS
    handshake and a sign-in each. A partition whose link fails or brings nothing within ``timeout`` is left out
    (the caller looks it up with a receiver of its own, whose errors say what went wrong)."""
    from eventhubs_spark.amqp.receive_connections import LinkSpec
    from eventhubs_spark.process.runtime import current

    connections = current().connections
    owner_level = config.owner_level if config.exclusive else None
    opened = []
    for pid, pos in lookups.items():
        spec = LinkSpec(config.consumer_group, pid, pos, owner_level, prefetch=1, read_ahead_events=1,
                        read_ahead_bytes=1 << 20)  # fmt: skip
        opened.append((pid, *connections.open_link(settings, spec)))
    found: dict[str, int] = {}
    deadline = time.monotonic() + timeout
    try:
        for pid, _, link in opened:
            sink = link.sink
            with sink.cond:
                while not sink.ready and sink.error is None and (left := deadline - time.monotonic()) > 0:
                    sink.cond.wait(min(left, 1.0))
                if sink.ready:
                    found[pid] = sink.ready[0].seqs[0]
    finally:
        for _, connection, link in opened:
            connection.close_link(link)
    if len(found) < len(lookups):
        _LOG.info("hub %s: %d of %d partitions' starting events not found over the shared connection; looked up "
                  "one receiver each", settings.hub, len(lookups) - len(found), len(lookups))  # fmt: skip
    return found


def _past_end(pos: Offset | EnqueuedTime, info: PartitionInfo) -> bool:
    """True when no event matches the position's filter: it names the partition's end."""
    if info.is_empty:
        return True
    _, inclusive, value = selector(pos)
    if isinstance(pos, Offset):
        # a geo-replicated hub's offsets are opaque ("10:0030"): never compared as numbers; the lookup decides
        if not (str(value).isdigit() and str(info.last_enqueued_offset).isdigit()):
            return False
        last = int(info.last_enqueued_offset)
        return int(value) > last or (int(value) == last and not inclusive)
    if info.last_enqueued_time is not None:
        return value > info.last_enqueued_time or (value == info.last_enqueued_time and not inclusive)
    return False


def _first_sequence(
    settings: ConnectionSettings, config: ReceiverConfig, partition: str, pos: Position, timeout: float
) -> int | None:
    return event_position(first_event(settings, config, partition, pos, timeout))


def event_position(event: Any) -> int:
    """An SDK event's position: its sequence number, with its replication segment on a geo-replicated hub."""
    epoch = (event.system_properties or {}).get(b"x-opt-sequence-number-epoch")
    return geo_segments.of_event(epoch, int(event.sequence_number))


def offset_of(settings: ConnectionSettings, config: ReceiverConfig, partition: str, sequence_number: int,
              timeout: float) -> str | None:  # fmt: skip
    """The offset of one event (by its position), read from the hub (there is no management call for it);
    None when that event is not there (retention took it, or on a geo-replicated hub a new segment began
    right after it, so the position before the segment's first event names no event)."""
    event = first_event(settings, config, partition, SequenceNumber(sequence_number), timeout)
    if event_position(event) != sequence_number:
        return None
    return str(event.offset)


def first_event(settings: ConnectionSettings, config: ReceiverConfig, partition: str, pos: Position,
                timeout: float) -> Any:  # fmt: skip
    """Read the first event at ``pos``. With exclusive receivers the lookup uses the query's owner level
    too: a plain receiver would be refused while the query's own pooled receivers hold the partition."""
    consumer_group = config.consumer_group
    value: Any = None
    inclusive = False
    if isinstance(pos, Offset | EnqueuedTime | SequenceNumber):
        _, inclusive, value = selector(pos)
    got: list[Any] = []
    # No retries inside the SDK: a refused sign-in (a missing hub, a wrong key) fails at once here, where
    # the SDK would retry it for about 13 s; everything else is retried below, until the deadline.
    client = settings.consumer(consumer_group=consumer_group, retry_total=0)

    def collect(events: Any) -> None:
        got.extend(events or [])

    consumer = sdk.create_consumer(
        client,
        consumer_group,
        partition,
        value,
        collect,
        inclusive=inclusive,
        owner_level=config.owner_level if config.exclusive else None,
        prefetch=1,
    )
    with failures.sign_in_errors(settings):
        try:
            return _first_received(consumer, got, settings, partition, pos, timeout)
        finally:
            close_later(consumer)  # closing waits up to 1 s for the SDK's keep-alive thread
            close_later(client)


def _first_received(consumer: Any, got: list[Any], settings: ConnectionSettings, partition: str, pos: Position,
                    timeout: float) -> Any:  # fmt: skip
    deadline = time.monotonic() + timeout
    last_error: str | None = None
    waits = settings.retry.backoff()
    while not got and time.monotonic() < deadline:
        try:
            consumer.receive(batch=True, max_batch_size=1, max_wait_time=None)
        except Exception as exc:
            failure = failures.failure(settings, exc)
            if failure is not None and not failure.retriable:
                raise failure from None
            last_error = str(failure or exc)  # a dropped link or connection: the next receive opens it again
            delay = waits.next_delay()
            if delay is None:  # eventhubs.retry.maxAttempts
                break
            time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            continue
        error = sdk.link_error(consumer)
        if error is not None and _lasting(error):
            raise EventHubsTimeoutError(
                f"could not read partition {partition} of hub {settings.hub!r} to translate {pos}: {error}"
            )
        last_error = str(error) if error is not None else last_error  # the SDK reconnects by itself
    if not got:
        cause = f"; last error: {last_error}" if last_error else ""
        limit = f"within {timeout:g} s (eventhubs.receiverTimeout)"
        if time.monotonic() < deadline:
            limit = f"in {waits.tries} attempts (eventhubs.retry.maxAttempts)"
        raise EventHubsTimeoutError(
            f"no event at {pos} in partition {partition} of hub {settings.hub!r} {limit}, although the partition "
            f"has events past it{cause}"
        )
    return got[0]


def _lasting(error: BaseException) -> bool:
    """A link error another attempt would meet again (by its AMQP condition): a higher owner level holds
    the partition, or the consumer group or the rights are missing. Anything else (a forced detach, a
    dropped connection) the SDK's next receive recovers from."""
    meaning = conditions.error_type(error)
    return meaning is not None and not meaning.retriable


def close_later(closable: Any) -> None:
    """Close an SDK consumer or client on a thread of its own, without waiting for it: an SDK consumer's
    ``close()`` joins its keep-alive thread, which wakes once a second. The consumer being closed has
    its own connection and is never used again, so nothing needs to wait for it."""
    threading.Thread(target=_close, args=(closable,), name="eventhubs-close", daemon=True).start()


def _close(closable: Any) -> None:
    try:
        closable.close()
    except Exception:
        _LOG.debug("closing %s failed", type(closable).__name__, exc_info=True)
