"""Entity configuration: ``--hub NAME:PARTITIONS`` flags and the official emulator's ``Config.json``.

Accepting the official emulator's file (``UserConfig.NamespaceConfig[].Entities[]``) means a team's
local set-up works with either emulator unchanged.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_CONSUMER_GROUP = "$Default"


@dataclass(frozen=True)
class HubConfig:
    """One event hub: its name, partition count, consumer groups, optional retention, and whether it is
    geo-replicated (replication segments, opaque offsets: :mod:`.broker`)."""

    name: str
    partitions: int = 4
    consumer_groups: tuple[str, ...] = (DEFAULT_CONSUMER_GROUP,)
    retention_seconds: float | None = None
    geo_replicated: bool = False


@dataclass
class EmulatorConfig:
    hubs: list[HubConfig] = field(default_factory=list)
    keys: dict[str, str] = field(default_factory=dict)  # policy name -> key; empty: accept any key
    max_message_size: int = 1024 * 1024
    # The service's idle rules (0 turns one off): a connection that receives nothing for this long is
    # closed (advertised in OPEN, 120 s as in the service's frame traces), and a consumer link with no
    # delivery and no credit from its client for this long is force-detached (30 min on the service).
    idle_timeout: float = 120.0
    link_idle_timeout: float = 1800.0


def parse_hub_flag(text: str) -> HubConfig:
    """Parse ``NAME:PARTITIONS`` (``PARTITIONS`` defaults to 4), e.g. ``telemetry:8``."""
    name, _, count = text.partition(":")
    name = name.strip()
    if not name:
        raise ValueError(f"--hub {text!r}: expected NAME:PARTITIONS, e.g. --hub telemetry:8")
    if not count:
        return HubConfig(name)
    try:
        partitions = int(count)
    except ValueError:
        raise ValueError(f"--hub {text!r}: PARTITIONS must be a whole number, e.g. --hub telemetry:8") from None
    if not 1 <= partitions <= 1024:
        raise ValueError(f"--hub {text!r}: PARTITIONS must be between 1 and 1024, e.g. --hub telemetry:8")
    return HubConfig(name, partitions)


def load_official_config(path: str | Path) -> EmulatorConfig:
    """Read the official Event Hubs emulator's ``Config.json``.

    Shape: ``{"UserConfig": {"NamespaceConfig": [{"Type": "EventHub", "Name": "emulatorNs1",
    "Entities": [{"Name": "eh1", "PartitionCount": "2", "ConsumerGroups": [{"Name": "cg1"}]}]}]}}``.
    ``PartitionCount`` may be a string or a number, as in the official samples. ``$Default`` is always
    present, as on the service.
    """
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"--config {path}: not valid JSON ({exc})") from None
    try:
        namespaces = doc["UserConfig"]["NamespaceConfig"]
    except (KeyError, TypeError):
        raise ValueError(
            f"--config {path}: expected UserConfig.NamespaceConfig[], e.g. "
            '{"UserConfig": {"NamespaceConfig": [{"Name": "ns", "Entities": '
            '[{"Name": "eh1", "PartitionCount": 2, "ConsumerGroups": [{"Name": "cg1"}]}]}]}}'
        ) from None
    config = EmulatorConfig()
    for ns in namespaces:
        for entity in ns.get("Entities", []):
            config.hubs.append(_entity(path, entity))
    return config


def _entity(path: str | Path, entity: dict[str, Any]) -> HubConfig:
    name = entity.get("Name")
    if not isinstance(name, str) or not name:
        raise ValueError(f'--config {path}: every entity needs a Name, e.g. {{"Name": "eh1"}}')
    try:
        partitions = int(entity.get("PartitionCount", 4))
    except (TypeError, ValueError):
        raise ValueError(
            f'--config {path}: entity {name!r} has a bad PartitionCount, e.g. "PartitionCount": 2'
        ) from None
    groups = [DEFAULT_CONSUMER_GROUP]
    for group in entity.get("ConsumerGroups", []) or []:
        group_name = group.get("Name") if isinstance(group, dict) else None
        if not isinstance(group_name, str) or not group_name:
            raise ValueError(f"--config {path}: entity {name!r} has a consumer group without a Name")
        if group_name.lower() != DEFAULT_CONSUMER_GROUP.lower():
            groups.append(group_name)
    return HubConfig(name, partitions, tuple(groups))
