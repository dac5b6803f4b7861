"""Unit tests of :mod:`eventhubs_spark.auth.credentials`."""

from __future__ import annotations

import builtins
import pickle
from typing import Any

import pytest

from eventhubs_spark.auth import credentials
from eventhubs_spark.errors import OptionError
from eventhubs_spark.options import (
    STREAM,
    WRITE,
    parse_options,
    read_options,
    write_options,
)
from tests.unit.support.service_credential import BASE


class _Recorder:
    def __init__(self) -> None:
        self.asked: list[tuple[str, ...]] = []

    def get_token(self, *scopes: str, **kwargs: Any) -> str:
        self.asked.append(scopes)
        return "token"


def test_tokens_come_from_the_entry_point_the_process_has_with_the_scope_given(no_databricks, monkeypatch):
    recorder = _Recorder()

    class Credentials:
        @staticmethod
        def getServiceCredentialsProvider(name: str) -> Any:  # Databricks' own name
            assert name == "eventhubs-reader"
            return recorder

    class DbUtils:
        credentials = Credentials()

    monkeypatch.setattr(builtins, "dbutils", DbUtils(), raising=False)  # a notebook's dbutils, on the driver
    raw = {**BASE, "databricks.serviceCredential.scope": "api://eventhubs-custom/.default"}
    entra = read_options(raw, STREAM).settings.entra
    assert entra is not None
    credential = credentials.EntraSettings(method=entra.method, service_credential=entra.service_credential,
                                           scope=entra.scope)._build(None)  # fmt: skip
    credential.get_token(credentials.EVENTHUBS_SCOPE)
    credential.get_token("https://storage.azure.com/.default")
    assert recorder.asked == [("api://eventhubs-custom/.default",), ("https://storage.azure.com/.default",)]


def test_inside_a_udf_the_service_credentials_module_gives_the_credential(standin):
    entra = read_options(dict(BASE), STREAM).settings.entra
    assert entra is not None
    credential = entra._build(None)
    assert type(credential._credential).__name__ == "ClientSecretCredential"
    with pytest.raises(PermissionError, match="does not exist, or you do not have ACCESS"):
        credentials.service_credential_provider("not-granted")


def test_entra_settings_travel_as_plain_data_and_build_one_credential_per_process():
    """What goes to executors pickles without any azure-identity object; each process builds its own."""
    import pytest

    pytest.importorskip("azure.identity")
    settings = parse_options(
        {"eventhubs.namespace": "ns.servicebus.windows.net", "eventhubs.name": "hub",
         "eventhubs.entra.tenantId": "t", "eventhubs.entra.clientId": "c", "eventhubs.entra.clientSecret": "TOPSECRET"},
        "stream",
    ).settings  # fmt: skip
    data = pickle.dumps(settings)
    assert b"azure.identity" not in data and b"TOPSECRET" in data  # the secret travels, in a Secret
    assert "TOPSECRET" not in repr(settings)
    copy = pickle.loads(data)
    credential = copy.entra.credential()
    assert type(credential).__name__ == "ClientSecretCredential"
    assert copy.entra.credential() is credential  # one token cache per process
    assert settings.entra.credential() is credential  # equal settings, same credential
    assert copy.pool_key() == settings.pool_key()


def test_off_databricks_the_option_fails_at_load_naming_the_runtime_that_brings_it(no_databricks):
    for mode, parse in ((STREAM, read_options), (WRITE, lambda raw, _m: write_options(raw))):
        with pytest.raises(OptionError, match=r"Databricks Runtime 16\.2 or later .*databricks\.service_credentials"):
            parse(dict(BASE), mode)
