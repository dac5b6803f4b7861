"""Unit tests of :mod:`eventhubs_spark.capture.store`."""

from __future__ import annotations

import pytest

from eventhubs_spark.capture.store import LocalStore, account_url, check_location
from eventhubs_spark.errors import OptionError


def test_a_local_store_lists_avro_files_by_name_prefix_and_reads_them_whole_or_in_part(tmp_path):
    for name in ("ns/hub/0/2026/01/01/00/00/00.avro", "ns/hub/0/2026/01/01/00/01/00.avro",
                 "ns/hub/1/2026/01/01/00/00/00.avro", "ns/hub/0/notes.txt"):  # fmt: skip
        path = tmp_path.joinpath(*name.split("/"))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"0123456789" if name.endswith(".avro") else b"x")
    store = LocalStore(str(tmp_path))
    assert sorted(store.names("ns/hub/0/")) == [
        "ns/hub/0/2026/01/01/00/00/00.avro",
        "ns/hub/0/2026/01/01/00/01/00.avro",
    ]
    assert store.names("ns/hub/2/") == []
    name = "ns/hub/1/2026/01/01/00/00/00.avro"
    assert store.read(name) == b"0123456789" and store.read(name, 3, offset=4) == b"456" and store.size(name) == 10


def test_a_location_is_a_folder_or_a_container_and_anything_else_is_refused_with_an_example(tmp_path):
    assert check_location(str(tmp_path)) == str(tmp_path)
    assert (
        check_location("abfss://capture@acct.dfs.core.windows.net/ns") == "abfss://capture@acct.dfs.core.windows.net/ns"
    )
    with pytest.raises(OptionError) as info:
        check_location("ftp://somewhere/capture")
    assert "eventhubs.capture.location" in str(info.value) and info.value.example
    assert account_url("abfss://c@acct.dfs.core.windows.net/x") == "https://acct.blob.core.windows.net"
    assert account_url("http://127.0.0.1:10000/devstoreaccount1/c") == "http://127.0.0.1:10000/devstoreaccount1"
