"""Unit tests of :mod:`eventhubs_spark.capture.names`."""

from __future__ import annotations

import datetime as dt

import pytest

from eventhubs_spark.capture.names import DEFAULT_FORMAT, NameFormat
from eventhubs_spark.errors import OptionError


def test_names_by_the_default_format_and_a_custom_one():
    default = NameFormat(DEFAULT_FORMAT)
    got = default.parse("ns/orders/3/2026/01/02/03/04/05.avro")
    assert got is not None and (got.namespace, got.hub, got.partition) == ("ns", "orders", "3")
    assert got.start == dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)
    assert default.parse("ns/orders/3/2026/01/02/03/04/05.avro.tmp") is None
    assert default.parse("ns/orders/3/2026/02/30/03/04/05.avro") is None  # no such day
    assert default.prefix("ns", "orders", "3") == "ns/orders/3/" and default.lists_by_partition
    custom = NameFormat("{Namespace}/{EventHub}/p{PartitionId}--{Year}-{Month}-{Day}--{Hour}-{Minute}-{Second}")
    got = custom.parse("ns/hub.a/p12--2025-12-31--23-59-58.avro")
    assert got is not None and (got.hub, got.partition, got.start.second) == ("hub.a", "12", 58)
    late = NameFormat("Prod_{EventHub}/{Year}_{Month}/{Day}/{Hour}/{Minute}/{Second}/{Namespace}_{PartitionId}")
    assert not late.lists_by_partition and late.prefix("ns", "h", "0") == "Prod_h/"
    got = late.parse("Prod_h/2026_03/04/05/06/07/ns_2.avro")
    assert got is not None and (got.namespace, got.partition) == ("ns", "2")
    with pytest.raises(OptionError, match=r"no \{Second\}.*all nine tokens.*nameFormat', '\{Namespace\}"):
        NameFormat("{Namespace}/{EventHub}/{PartitionId}/{Year}/{Month}/{Day}/{Hour}/{Minute}")
    with pytest.raises(OptionError, match=r"unknown token \{Partition\}"):
        NameFormat(DEFAULT_FORMAT.replace("{PartitionId}", "{Partition}"))
