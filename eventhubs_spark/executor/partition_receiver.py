"""Executor side: one partition's receiver, reading sequence-number ranges with resume and recovery.

A receiver stands at a position (the next sequence number it hands out) on its own link of the
process's shared connection; a range that starts there resumes, one that starts elsewhere reopens the
link there. What the link read past a range is held for the next one (:mod:`eventhubs_spark.executor.read_ahead`); where
receivers are kept between tasks is the pool's job (:mod:`eventhubs_spark.executor.receiver_pool`).
"""

from __future__ import annotations

import bisect
import logging
import time
from collections.abc import Callable, Generator, Iterator

from eventhubs_spark.amqp import conditions, failures
from eventhubs_spark.amqp.messages import RawEvents
from eventhubs_spark.amqp.receive_connections import Connections, Link, LinkSpec, SharedConnection
from eventhubs_spark.auth.settings import ConnectionSettings
from eventhubs_spark.errors import EventHubsTimeoutError, NetworkError, ReceiverDisconnectedError, data_loss_error
from eventhubs_spark.executor.read_ahead import HeldEvents
from eventhubs_spark.interprocess.task_ranges import RangeResult, ReceiverConfig
from eventhubs_spark.positions import geo_segments

_LOG = logging.getLogger(__name__)


# How long a reader waits on its link before it looks at the clock and the link's state again.
_WAIT_SLICE = 0.5


class PartitionReceiver:
    """One partition's receiving link on the process's shared connection, positioned by sequence number.

    ``position`` is the next sequence number it hands out; the events its link read ahead of that
    wait in the link's sink (and in ``held``, the part of the last chunk a range did not need).

    The SDK's ``receive()`` retries some attach errors forever without raising, so progress is watched
    here: a range that makes no progress for ``eventhubs.receiverTimeout`` fails with an error that
    names the hub, partition and range, and the link's own error when it has one. Between reopens after a
    dropped link or connection the receiver waits as the query's retry policy says (``eventhubs.retry.*``).

    Owner-level (epoch) receivers are claims on a partition. Any newer owner-level receiver of the
    consumer group takes the partition: the driver's own position lookups between micro-batches do, and
    so does another reader. A receiver displaced while it sat idle in the pool is simply reopened at its
    position when its next task starts (nothing was lost: every event it handed out was before the
    detach, and it hands out no other). A displacement during a read is answered by one reopen at the
    next unread event; a second one in the same task means someone else really reads the partition, and
    the task fails.
    """

    def __init__(
        self, settings: ConnectionSettings, config: ReceiverConfig, partition: str, connections: Connections
    ) -> None:
        self.settings = settings
        self.connections = connections  # the process's shared connections its link opens on
        self.config = config
        self.partition = partition
        self._link: Link | None = None
        self._connection: SharedConnection | None = None
        self.held = HeldEvents()
        self.position: int | None = None  # the next sequence number this receiver will hand out
        self.opens = 0
        self.displaced_idle = 0  # reopened because the link was taken while the receiver sat in the pool
        self.displaced_reading = 0  # reopened once because the link was taken during a read
        self.closed_idle = 0  # reopened because the service closed the idle link or connection
        self.reconnects = 0  # reopened during a read after a dropped link or connection
        self._unreachable: NetworkError | None = None  # the last attempt could not connect (see _raise_if_lasting)
        # Its pool's: told after what this receiver vouches for may have changed (see newest_end), on whichever
        # thread changed it (its links' reading threads too: LinkSink.on_vouch)
        self.on_vouch: Callable[[], None] | None = None

    def open_at(self, sequence_number: int, keep: RawEvents | None = None) -> None:
        """Read from ``sequence_number`` on a new link; ``keep``: events before it still to hand out."""
        self._close_link()
        spec = LinkSpec(
            consumer_group=self.config.consumer_group,
            partition=self.partition,
            start=sequence_number,
            owner_level=self.config.owner_level if self.config.exclusive else None,
            prefetch=self.config.prefetch,
            read_ahead_events=self.config.read_ahead_events,
            read_ahead_bytes=self.config.read_ahead_bytes,
        )
        self._connection, self._link = self.connections.open_link(self.settings, spec)
        # its reading thread may have brought events or opened the link already: looked at again after this (the
        # sink tells the pool itself: one call fewer on the reading thread for every run of events it hands over)
        self._link.sink.on_vouch = self.on_vouch
        self._vouch_changed()
        self.held.replace(keep)
        if keep is None:
            self.position = sequence_number
        self.opens += 1

    def _vouch_changed(self) -> None:
        on_vouch = self.on_vouch
        if on_vouch is not None:
            on_vouch()

    def newest_end(self) -> tuple[int, str, int | None] | None:
        """Where the partition ends as this receiver's link knows it: (the position after the newest event the link
        brought, that event's offset and enqueued time in epoch ms), while the link is open, has not failed and may
        read on (it has credit: its reading thread did not hold credit back because what the link holds reached its
        bounds). Such a link would have brought any later event as the service enqueued it, so the end is at most a
        moment behind the partition's (:mod:`eventhubs_spark.interprocess.partition_ends`). None when it cannot say:
        no link, one still opening, ended or full, or one that has brought nothing yet (or whose newest event's
        message did not show its offset)."""
        link = self._link
        if link is None or link.state != "open":
            return None
        sink = link.sink
        newest = sink.newest
        # starved: its reading thread held credit back for want of room (until then the link has credit left)
        if newest is None or sink.error is not None or sink.starved:
            return None
        return newest[0] + 1, newest[1], newest[2]

    def _reopen_after_held(self, fallback: int) -> None:
        """Open a new link after every event this receiver still holds (read ahead before its link ended),
        keeping them: nothing is read twice, nothing skipped. Without any, at ``fallback``."""
        held = self.held.drain(self._link)
        if held.seqs:
            self.open_at(held.seqs[-1] + 1, keep=held)
        else:
            self.open_at(fallback)

    def read_range(self, start: int, end: int, fail_on_data_loss: bool, result: RangeResult) -> Iterator[RawEvents]:
        """Yield the events with ``start <= sequence number < end``, in order, each once, undecoded: resume
        where the receiver stands, take what its link holds, recover when the link brings nothing, and cut
        each chunk to the range."""
        self._resume(start)
        recovery = _Recovery(self, end)
        expected = start
        while expected < end:
            chunk = self._next_events(end - expected)
            if chunk is None:
                recovery.after_nothing(expected)  # reopens, waits, or fails the read
                continue
            after = yield from self._slice(chunk, expected, end, fail_on_data_loss, result)
            if after > expected:
                recovery.progressed()
            expected = after
        self.position = end

    def _resume(self, start: int) -> None:
        """Stand at ``start`` with a live link: reopen there when the receiver stands elsewhere, or after what
        it holds when its link ended while it sat in the pool."""
        if self.position != start or self._link is None:
            self.open_at(start)
            return
        closed = self._closed_while_idle()
        if closed is None:
            return
        # Another owner-level receiver of the group (usually the driver's own lookup between micro-batches)
        # took the link, or the service closed an idle link or connection, while this receiver sat in the
        # pool: not an error, it reopens after what it holds.
        if conditions.is_stolen(self._link_exception()):
            self.displaced_idle += 1
        else:
            self.closed_idle += 1
        _LOG.info("hub %s partition %s: the receiver's link was closed while idle; reopening at %d (%s)",
                  self.settings.hub, self.partition, start, _first_line(closed))  # fmt: skip
        self._reopen_after_held(start)

    def _slice(
        self, chunk: RawEvents, expected: int, end: int, fail_on_data_loss: bool, result: RangeResult
    ) -> Generator[RawEvents, None, int]:
        """Yield the part of ``chunk`` that is the range's next events, in runs without gaps (a gap is data
        lost to retention), keep what lies past ``end`` for the next range; returns the next expected
        sequence number."""
        seqs = chunk.seqs
        if seqs[0] < expected:  # a reopened link re-delivered what was already read
            chunk.take(bisect.bisect_left(seqs, expected))
            if not chunk.seqs:
                return expected
            seqs = chunk.seqs
        if seqs[0] > expected and geo_segments.segment_of(seqs[0]) > geo_segments.segment_of(expected):
            # a new replication segment (the secondary region was promoted): the partition goes on there, and
            # what the old segment lost in the promotion is not a gap in what this query can read
            _LOG.info("hub %s partition %s: a new replication segment begins at %s (after %s)", self.settings.hub,
                      self.partition, geo_segments.show(seqs[0]), geo_segments.show(expected - 1))  # fmt: skip
            expected = seqs[0]
        if seqs[0] > expected:  # the events before this chunk are gone
            expected = self._lost(expected, min(seqs[0], end), fail_on_data_loss, result)
            if expected >= end:
                self.held.hold(chunk)
                return expected
        if seqs[-1] >= end:  # the rest is the next range's: held back
            head = chunk.take(bisect.bisect_left(seqs, end))
            self.held.hold(chunk)
            chunk = head
        while chunk.seqs:
            gap = _first_gap(chunk.seqs)
            piece = chunk if gap is None else chunk.take(gap)
            expected = piece.seqs[-1] + 1
            result.read += len(piece)
            self.position = expected
            yield piece
            if gap is None:
                break
            expected = self._lost(expected, chunk.seqs[0], fail_on_data_loss, result)
        return expected

    def _lost(self, expected: int, until: int, fail_on_data_loss: bool, result: RangeResult) -> int:
        """Events ``[expected, until)`` are gone: fail, or count them and go on from ``until``."""
        if fail_on_data_loss:
            raise data_loss_error(self.settings.hub, self.partition, expected, until)
        _LOG.warning("hub %r partition %s: %d events [%d, %d) were lost to retention; continuing because "
                     "failOnDataLoss=false", self.settings.hub, self.partition, until - expected, expected,
                     until)  # fmt: skip
        result.lost += until - expected
        return until

    def _raise_if_lasting(self, error: str) -> str:
        """A refused sign-in, or a failure to connect that will not heal (an untrusted certificate, a proxy
        that refuses), fails the task at once, as itself; returns the error to report for the others (a
        failure to connect in words that name the option to change)."""
        exc = self._link.sink.exception if self._link is not None else None
        failure = failures.failure(self.settings, exc) if exc is not None else None
        self._unreachable = failure if isinstance(failure, NetworkError) else None
        if failure is None:
            return error
        if not failure.retriable:
            raise failure
        return str(failure)

    def _closed_while_idle(self) -> str | None:
        """Why the link or its connection ended while this receiver sat in the pool, else None. The
        connection's reader notices at once (it reads between tasks too), so this only asks the sink."""
        return self._link.sink.error if self._link is not None else None

    def _next_events(self, wanted: int) -> RawEvents | None:
        """Up to ``wanted`` events, waiting a little for them; None when none came (see ``_link_error``)."""
        held = self.held.take(wanted)
        return held if held is not None else self._from_link(wanted)

    def _from_link(self, wanted: int) -> RawEvents | None:
        """Up to ``wanted`` events the link decoded, waiting a little for them; None when none came."""
        if self._link is None:
            return None
        sink = self._link.sink
        with sink.cond:
            if not sink.ready and sink.error is None:
                sink.cond.wait(min(_WAIT_SLICE, self.config.receiver_timeout))
            return sink.take(wanted)

    def _link_error(self) -> str | None:
        return self._link.sink.error if self._link is not None else None

    def _link_exception(self) -> BaseException | None:
        """What ended the link, as the SDK raised or reported it (its AMQP condition tells what it means)."""
        return self._link.sink.exception if self._link is not None else None

    def _close_link(self) -> None:
        link, connection = self._link, self._connection
        self._link = self._connection = None
        self._vouch_changed()
        if link is not None and connection is not None:
            connection.close_link(link)

    def close(self) -> None:
        self._close_link()
        self.held.clear()


class _Recovery:
    """One read's answer to a link that brought nothing within a wait: after a displacement, one reopen at the
    next unread event (a second one means someone else reads the partition: the read fails); after a dropped
    link or connection, a reopen a little later each time; a refused sign-in or a failure to connect that
    will not heal fails at once; and only ``eventhubs.receiverTimeout`` without progress fails the read."""

    def __init__(self, receiver: PartitionReceiver, end: int) -> None:
        self.receiver = receiver
        self.end = end
        self.reopened = False
        self.waits = receiver.settings.retry.backoff()
        self.last_error: str | None = None
        self.last_progress = time.monotonic()

    def progressed(self) -> None:
        self.last_progress = time.monotonic()
        self.waits.reset()  # it reads again: the next reopen need not wait long

    def after_nothing(self, expected: int) -> None:
        r = self.receiver
        error = r._link_error()
        if error is not None:
            error = r._raise_if_lasting(error)
            if conditions.is_stolen(r._link_exception()):
                if self.reopened:
                    raise _link_failure(r, error, expected, self.end)
                # Events handed out so far came before the detach; read on from the next one.
                self.reopened = True
                r.displaced_reading += 1
                _LOG.warning("hub %s partition %s: receiver displaced while reading; reopening once at %d before "
                             "%d (%s)", r.settings.hub, r.partition, expected, self.end,
                             _first_line(error))  # fmt: skip
            else:
                self.last_error = error
                r.reconnects += 1
                delay = self.waits.next_delay()
                if delay is None:
                    raise EventHubsTimeoutError(
                        f"hub {r.settings.hub!r} partition {r.partition}: the link ended {self.waits.tries} times "
                        f"without progress while reading [{expected}, {self.end}) (eventhubs.retry.maxAttempts is "
                        f"{r.settings.retry.max_attempts}); last error: {error}"
                    )
                time.sleep(delay)
            r._reopen_after_held(expected)
        if time.monotonic() - self.last_progress <= r.config.receiver_timeout:
            return
        if r._unreachable is not None:  # it never got through: say so, and what to change
            raise NetworkError(
                f"could not read hub {r.settings.hub!r} partition {r.partition} for {r.config.receiver_timeout:g} s "
                f"(eventhubs.receiverTimeout): {r._unreachable}"
            )
        cause = f"; last error: {self.last_error}" if self.last_error else ""
        raise EventHubsTimeoutError(
            f"no event from hub {r.settings.hub!r} partition {r.partition} for {r.config.receiver_timeout:g} s "
            f"(eventhubs.receiverTimeout) while reading sequence numbers [{expected}, {self.end}); the partition "
            f"may be stalled or unavailable{cause}"
        )


def _first_gap(seqs: list[int]) -> int | None:
    """The index of the first position that does not follow the one before it, or None when they run on
    without a gap (the usual case, found without a loop). A new replication segment is no gap."""
    if seqs[-1] - seqs[0] == len(seqs) - 1:
        return None
    for i in range(1, len(seqs)):
        if seqs[i] != seqs[i - 1] + 1 and geo_segments.segment_of(seqs[i]) == geo_segments.segment_of(seqs[i - 1]):
            return i
    return None


def _first_line(text: str) -> str:
    return text.splitlines()[0][:300] if text else text


def _link_failure(receiver: PartitionReceiver, error: str, start: int, end: int) -> Exception:
    where = f"hub {receiver.settings.hub!r} partition {receiver.partition} (sequence numbers [{start}, {end}))"
    return ReceiverDisconnectedError(
        f"{where}: another reader with an equal or higher owner level (epoch) took this partition in consumer "
        f"group {receiver.config.consumer_group!r}. Give each query its own consumer group, or stop the other "
        f"reader. Service said: {error}"
    )
