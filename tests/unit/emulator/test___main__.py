"""Unit tests of :mod:`eventhubs_emulator.__main__`."""

from __future__ import annotations

import json
import time

import pytest

from eventhubs_emulator.__main__ import build, main


def test_cli_errors(capsys):
    assert main(["--port", "0"]) == 2
    assert "no event hub configured" in capsys.readouterr().err
    assert main(["--hub", "x:y"]) == 2
    assert main(["--hub", "x", "--key", "novalue"]) == 2
    assert "NAME=KEY" in capsys.readouterr().err


def test_cli_build_merges_config_and_flags(tmp_path):
    import argparse

    from eventhubs_emulator.__main__ import add_arguments

    path = tmp_path / "Config.json"
    path.write_text(
        json.dumps({"UserConfig": {"NamespaceConfig": [{"Entities": [{"Name": "a", "PartitionCount": 1}]}]}})
    )
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    emu = build(parser.parse_args(["--config", str(path), "--hub", "b:2", "--key", "k=v"]))
    assert sorted(emu.broker.hubs) == ["a", "b"]
    assert emu.config.keys == {"k": "v"}


def test_cli_geo_replication_flags_and_their_errors():
    import argparse

    from eventhubs_emulator.__main__ import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    emu = build(parser.parse_args(["--hub", "g:2", "--geo-replicated", "--promote-every", "30", "--promote-lose", "3"]))
    assert emu.broker.hubs["g"].geo_replicated and (emu.promote_every, emu.promote_lose) == (30.0, 3)
    with pytest.raises(ValueError, match="--promote-every needs --geo-replicated"):
        build(parser.parse_args(["--hub", "g:2", "--promote-every", "30"]))
    with pytest.raises(ValueError, match="--promote-lose -1"):
        build(parser.parse_args(["--hub", "g:2", "--geo-replicated", "--promote-lose", "-1"]))


def test_a_stop_signal_during_the_wait_is_seen_without_taking_a_lock():
    """The emulator's and the demo's stop flag: set from a real signal handler while the main thread waits.

    (A ``threading.Event`` set from a handler can deadlock on its own lock; the flag takes none.)
    """
    import os
    import signal
    import threading

    from eventhubs_emulator.__main__ import SignalFlag

    flag = SignalFlag()
    previous = signal.signal(signal.SIGUSR1, flag.set)
    try:
        timer = threading.Timer(0.2, os.kill, args=(os.getpid(), signal.SIGUSR1))
        timer.start()
        started = time.monotonic()
        assert flag.wait(10.0) is True
        assert time.monotonic() - started < 5.0
        assert flag.is_set()
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert SignalFlag().wait(0.05) is False
