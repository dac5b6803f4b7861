"""Helpers shared by the unit tests that came from test_checkpoints_units.py."""

from __future__ import annotations

NS, HUB, CG = "ns.servicebus.windows.net", "hub", "$default"
