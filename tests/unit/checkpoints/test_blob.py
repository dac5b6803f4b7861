"""Unit tests of :mod:`eventhubs_spark.checkpoints.blob` (the store itself runs against Azurite in
``tests/integration/connector/test_checkpoint_store_azurite.py``)."""

from __future__ import annotations

from eventhubs_spark.checkpoints.blob import describe_store_error


class _StorageError(Exception):
    def __init__(self, text: str, code: str = "", status: int | None = None) -> None:
        super().__init__(text)
        self.error_code, self.status_code = code, status


def test_a_blob_service_failure_is_one_line_with_its_fix_where_it_is_known():
    missing = _StorageError("The specified container does not exist.\nRequestId:1\nTime:...", "ContainerNotFound", 404)
    said = describe_store_error(missing, "mirror")
    assert "'mirror' does not exist" in said and "az storage container create --name mirror" in said
    azurite = _StorageError("The API version 2025-01-05 is not supported by Azurite.\nmore")
    assert describe_store_error(azurite).startswith("Azurite refuses the storage SDK's API version 2025-01-05")
    other = describe_store_error(_StorageError("Server busy\n<xml/>", "ServerBusy", 503))
    assert other == "_StorageError 503: Server busy" and "\n" not in other
