"""Unit tests of :mod:`eventhubs_spark.cli.inputs`."""

from __future__ import annotations

import pytest

from eventhubs_spark.cli.inputs import secret


def test_a_secret_comes_from_its_flag_else_the_environment_else_the_command_says_both(monkeypatch):
    monkeypatch.setenv("EVENTHUBS_CONNECTION_STRING", "from-env")
    assert secret("from-flag", "EVENTHUBS_CONNECTION_STRING", "--connection-string") == "from-flag"
    assert secret(None, "EVENTHUBS_CONNECTION_STRING", "--connection-string") == "from-env"
    monkeypatch.delenv("EVENTHUBS_CONNECTION_STRING")
    with pytest.raises(SystemExit) as info:
        secret(None, "EVENTHUBS_CONNECTION_STRING", "--connection-string")
    assert str(info.value) == "error: pass --connection-string or set EVENTHUBS_CONNECTION_STRING"
