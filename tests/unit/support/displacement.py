"""Helpers shared by the unit tests that came from test_displacement_units.py."""

from __future__ import annotations

from types import SimpleNamespace

from eventhubs_spark.amqp.frame_reader import LinkSink
from eventhubs_spark.amqp.messages import RawEvents
from eventhubs_spark.amqp.receive_connections import Connections
from eventhubs_spark.auth.settings import parse_connection_string
from eventhubs_spark.executor.partition_receiver import PartitionReceiver
from eventhubs_spark.interprocess.task_ranges import ReceiverConfig

SETTINGS = parse_connection_string(
    "Endpoint=sb://127.0.0.1:1;SharedAccessKeyName=a;SharedAccessKey=b;EntityPath=hub;UseDevelopmentEmulator=true"
)


STOLEN = (
    "Error condition: amqp:link:stolen\n Error Description: New receiver 'x' with higher epoch of '0' is created "
    "hence current receiver 'y' with epoch '0' is getting disconnected."
)


def columns(seqs: range) -> RawEvents:
    events = RawEvents()
    for seq in seqs:
        events.append(seq, b"")
    return events


class ScriptedReceiver(PartitionReceiver):
    """A partition of events 0..999 behind scripted links.

    ``steals[i]``: how many events the i-th link opened hands out before it reports ``link:stolen``
    (``None``: never). ``taken_while_idle``: the current link was taken while the receiver sat idle.
    """

    def __init__(self, steals: list[int | None]) -> None:
        super().__init__(SETTINGS, ReceiverConfig("$Default", 4, 5.0, True), "0", Connections())
        self.steals = list(steals)
        self.links = 0
        self.taken_while_idle = False
        self.closed_by_service: str | None = None
        self._next = 0
        self._left: int | None = None
        self._stolen = False

    def open_at(self, sequence_number: int, keep: RawEvents | None = None) -> None:
        self._link = SimpleNamespace(sink=LinkSink())  # nothing arrives there: the script hands events out
        self.held.replace(keep)
        if keep is None:
            self.position = sequence_number
        self.opens += 1
        self._next = sequence_number
        self._left = self.steals[self.links] if self.links < len(self.steals) else None
        self.links += 1
        self._stolen = False
        self.taken_while_idle = False
        self.closed_by_service = None

    def _closed_while_idle(self) -> str | None:
        return STOLEN if self.taken_while_idle else self.closed_by_service

    def _from_link(self, wanted: int) -> RawEvents | None:
        if self._stolen:
            return None
        count = min(wanted, 3)
        if self._left is not None:
            if self._left == 0:
                self._stolen = True
                return None
            count = min(count, self._left)
            self._left -= count
        events = columns(range(self._next, self._next + count))
        self._next += count
        return events

    def _link_error(self) -> str | None:
        return STOLEN if self._stolen else None

    def _link_exception(self) -> BaseException | None:
        """What the SDK reports for each: a stolen link carries its condition, the service's idle closes theirs."""
        from azure.eventhub._pyamqp.error import AMQPLinkError

        if self._stolen or self.taken_while_idle:
            return AMQPLinkError(condition=b"amqp:link:stolen", description=STOLEN)
        if self.closed_by_service:
            return AMQPLinkError(condition=b"amqp:link:detach-forced", description=self.closed_by_service)
        return None
