"""Helpers shared by the unit tests that came from test_capture_files.py."""

from __future__ import annotations

from eventhubs_emulator import capture as writer


class _Event:
    """The broker's event, as the writer reads it."""

    def __init__(self, seq: int, ms: int, body: bytes, key: str | None = None, props: dict | None = None) -> None:
        from eventhubs_emulator import amqp

        self.sequence_number, self.segment, self.offset, self.enqueued_ms = seq, -1, seq * 100, ms
        self.partition_key = key
        sections = b"\x00\x53\x72" + amqp.encode_map({})
        if props:
            sections += amqp.encode_section(amqp.APPLICATION_PROPERTIES, props)
        sections += amqp.encode_section(amqp.DATA, body)
        self.body, self.size = sections, len(sections)


def _file(events: list[_Event], codec: str = "null") -> bytes:
    return writer.container_file([writer.event_record(e, str(e.offset)) for e in events], codec)
