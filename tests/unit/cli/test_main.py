"""Unit tests of :mod:`eventhubs_spark.cli.main`."""

from __future__ import annotations

import pytest

from eventhubs_spark.cli import main


def test_the_command_names_its_verbs_and_a_missing_argument_is_said_plainly(capsys, monkeypatch):
    with pytest.raises(SystemExit) as unknown:
        main(["bogus"])
    assert unknown.value.code == 2 and "demo" in capsys.readouterr().err, "argparse lists the verbs"
    monkeypatch.delenv("EVENTHUBS_CONNECTION_STRING", raising=False)
    with pytest.raises(SystemExit) as missing:
        main(["lag"])
    assert str(missing.value) == "error: pass --checkpoint-location (the query's Spark checkpoint location)"
    with pytest.raises(SystemExit) as no_secret:
        main(["checkpoints", "--container", "c"])
    assert "--connection-string or set EVENTHUBS_CONNECTION_STRING" in str(no_secret.value)
