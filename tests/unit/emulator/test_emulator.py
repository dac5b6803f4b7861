"""Unit tests of :mod:`eventhubs_emulator`."""

from __future__ import annotations


def test_the_connection_and_the_server_do_not_import_each_other():
    """Framing and links (connection.py) ask the service through an interface of their own (Service); only
    the server imports the connection."""
    import pathlib
    import re

    import eventhubs_emulator

    text = (pathlib.Path(eventhubs_emulator.__file__).parent / "connection.py").read_text()
    assert not re.search(r"^\s*(from \.server|from eventhubs_emulator\.server|import .*server)", text, re.M)


def test_the_emulator_imports_nothing_of_the_connector():
    import pathlib
    import re

    import eventhubs_emulator

    for path in pathlib.Path(eventhubs_emulator.__file__).parent.glob("*.py"):
        assert not re.search(r"^\s*(from|import) eventhubs_spark", path.read_text(), re.M), path.name
