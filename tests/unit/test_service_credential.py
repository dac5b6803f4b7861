"""Issue 52: databricks.serviceCredential, without Databricks: off Databricks it fails at load() saying which
runtime brings it; with the stand-in entry points (tests/databricks_standin, or a dbutils object) the credential
comes from the one the process has, asked for Event Hubs' scope or the one given; nothing else is tried."""

from __future__ import annotations

import builtins
import sys
from pathlib import Path
from typing import Any

import pytest

from eventhubs_spark.auth import credentials
from eventhubs_spark.errors import OptionError
from eventhubs_spark.options import STREAM, WRITE, read_options, write_options

STANDIN = str(Path(__file__).resolve().parents[1] / "databricks_standin")
BASE = {"eventhubs.namespace": "ns.servicebus.windows.net", "eventhubs.name": "hub",
        "databricks.serviceCredential": "eventhubs-reader"}  # fmt: skip


@pytest.fixture
def no_databricks(monkeypatch):
    monkeypatch.setitem(sys.modules, "databricks", None)  # import fails, as off Databricks
    monkeypatch.setitem(sys.modules, "databricks.service_credentials", None)
    monkeypatch.delattr(builtins, "dbutils", raising=False)


@pytest.fixture
def standin(monkeypatch):
    monkeypatch.syspath_prepend(STANDIN)
    for name in ("databricks", "databricks.service_credentials"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.setenv("EVENTHUBS_TEST_SERVICE_CREDENTIALS", '{"eventhubs-reader": {"tenant": "t", "client": "c", '
                       '"secret": "s", "authority": "https://127.0.0.1:1"}}')  # fmt: skip


def test_off_databricks_the_option_fails_at_load_naming_the_runtime_that_brings_it(no_databricks):
    for mode, parse in ((STREAM, read_options), (WRITE, lambda raw, _m: write_options(raw))):
        with pytest.raises(OptionError, match=r"Databricks Runtime 16\.2 or later .*databricks\.service_credentials"):
            parse(dict(BASE), mode)


def test_the_service_credential_is_the_whole_sign_in(standin):
    for extra, named in (({"eventhubs.entra.clientId": "x"}, "eventhubs.entra.clientId"),
                         ({"eventhubs.auth": "managedIdentity"}, "eventhubs.auth=managedIdentity"),
                         ({"eventhubs.sasToken": "SharedAccessSignature sr=a&sig=b&se=1900000000&skn=c"},
                          "eventhubs.sasToken")):  # fmt: skip
        with pytest.raises(OptionError, match=f"databricks.serviceCredential signs in on its own: drop {named}"):
            read_options({**BASE, **extra}, STREAM)
    with pytest.raises(OptionError, match="databricks.serviceCredential.scope goes with databricks.serviceCredential"):
        read_options({"eventhubs.namespace": "ns.servicebus.windows.net", "eventhubs.name": "hub",
                      "databricks.serviceCredential.scope": "x"}, STREAM)  # fmt: skip
    settings = read_options(dict(BASE), STREAM).settings
    assert settings.auth_method == "serviceCredential"
    assert "eventhubs-reader" not in repr(settings)  # the name is kept like a secret


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
