"""Unit tests of :mod:`eventhubs_emulator.config`."""

from __future__ import annotations

import json

import pytest

from eventhubs_emulator.config import load_official_config, parse_hub_flag


def test_hub_flags():
    assert parse_hub_flag("t:8").partitions == 8
    assert parse_hub_flag("t").partitions == 4
    for bad in ("", ":3", "t:x", "t:0", "t:5000"):
        with pytest.raises(ValueError, match="--hub"):
            parse_hub_flag(bad)


def test_official_config(tmp_path):
    path = tmp_path / "Config.json"
    path.write_text(
        json.dumps(
            {
                "UserConfig": {
                    "NamespaceConfig": [
                        {
                            "Type": "EventHub",
                            "Name": "emulatorNs1",
                            "Entities": [
                                {"Name": "eh1", "PartitionCount": "2", "ConsumerGroups": [{"Name": "cg1"}]},
                                {"Name": "eh2", "PartitionCount": 3, "ConsumerGroups": []},
                            ],
                        }
                    ],
                    "LoggingConfig": {"Type": "File"},
                }
            }
        )
    )
    config = load_official_config(path)
    assert [(h.name, h.partitions, h.consumer_groups) for h in config.hubs] == [
        ("eh1", 2, ("$Default", "cg1")),
        ("eh2", 3, ("$Default",)),
    ]
    path.write_text("{}")
    with pytest.raises(ValueError, match="UserConfig.NamespaceConfig"):
        load_official_config(path)
    path.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        load_official_config(path)
