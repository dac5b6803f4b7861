"""Unit tests of :mod:`eventhubs_spark.errors`."""

from __future__ import annotations

import pickle

from eventhubs_spark.errors import (
    ERROR_TYPES,
    DataLossError,
    OptionError,
    data_loss_error,
)


def test_the_data_loss_error_names_hub_partition_range_count_and_the_option():
    error = data_loss_error("hub", "3", 10, 25, begins_at=25)
    assert isinstance(error, DataLossError)
    text = str(error)
    assert "'hub' partition 3" in text and "[10, 25)" in text and "15 events" in text and "begins at 25" in text
    assert "failOnDataLoss=false" in text


def test_every_error_type_survives_a_trip_to_another_process():
    for name, cls in ERROR_TYPES.items():
        error = cls("message") if cls is not OptionError else OptionError("bad option", example=".option('a', 'b')")
        copy = pickle.loads(pickle.dumps(error))
        assert type(copy) is cls and str(copy) == str(error), name
    assert pickle.loads(pickle.dumps(OptionError("x", example="e"))).example == "e"
