"""Helpers shared by the unit tests that came from test_reader_units.py."""

from __future__ import annotations

CONN = "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=n;SharedAccessKey=TOPSECRET;EntityPath=hub"
