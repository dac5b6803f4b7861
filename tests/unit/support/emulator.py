"""Helpers shared by the unit tests that came from test_emulator_units.py."""

from __future__ import annotations

from eventhubs_emulator import amqp


def message(body: bytes, key: str | None = None) -> bytes:
    out = b""
    if key is not None:
        out += amqp.encode_section(amqp.MESSAGE_ANNOTATIONS, {amqp.Symbol("x-opt-partition-key"): key})
    return out + amqp.encode_section(amqp.DATA, body)
