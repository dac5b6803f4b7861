"""Helpers shared by the unit tests that came from test_service_units.py."""

from __future__ import annotations

import time
from collections.abc import Iterator

from eventhubs_spark.amqp.messages import RawEvents
from eventhubs_spark.auth.settings import parse_connection_string
from eventhubs_spark.interprocess.task_ranges import RangeRequest, RangeResult, ReceiverConfig

SETTINGS = parse_connection_string(
    "Endpoint=sb://127.0.0.1:1;SharedAccessKeyName=a;SharedAccessKey=TOPSECRET;EntityPath=hub;UseDevelopmentEmulator=true"
)


def request(start: int, end: int) -> RangeRequest:
    return RangeRequest(ReceiverConfig(receiver_timeout=5.0), "3", start, end, True, settings=SETTINGS)


def message(seq: int) -> bytes:
    """An event's AMQP bytes as the service delivers them: its annotations, and a body."""
    from eventhubs_emulator import amqp
    from eventhubs_emulator.amqp import Symbol, Timestamp

    annotations = {Symbol("x-opt-sequence-number"): seq, Symbol("x-opt-offset"): str(seq),
                   Symbol("x-opt-enqueued-time"): Timestamp(1_700_000_000_000)}  # fmt: skip
    return amqp.encode_section(amqp.MESSAGE_ANNOTATIONS, annotations) + amqp.encode_section(amqp.DATA, b"b%d" % seq)


def scripted(fail_at: int | None = None, error: Exception | None = None, pause_at: int | None = None):
    """A read_here that hands out [start, end) in chunks of 10 (undecoded, as receivers hold them),
    raising ``error`` at ``fail_at``."""
    starts: list[int] = []

    def read_here(req: RangeRequest, result: RangeResult, pool: object = None) -> Iterator[RawEvents]:
        starts.append(req.start)
        for first in range(req.start, req.end, 10):
            if fail_at is not None and first >= fail_at:
                raise error or RuntimeError("boom")
            if pause_at is not None and first >= pause_at:
                time.sleep(60)
            raw = RawEvents()
            for seq in range(first, min(first + 10, req.end)):
                raw.append(seq, message(seq))
            result.read += len(raw)
            yield raw

    return read_here, starts
