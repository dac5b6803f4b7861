"""Helpers shared by the unit tests that came from test_service_credential.py."""

from __future__ import annotations

from pathlib import Path

STANDIN = str(Path(__file__).resolve().parents[2] / "databricks_standin")


BASE = {"eventhubs.namespace": "ns.servicebus.windows.net", "eventhubs.name": "hub",
        "databricks.serviceCredential": "eventhubs-reader"}  # fmt: skip
