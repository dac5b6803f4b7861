"""Unit tests of :mod:`eventhubs_spark.auth.sign_in`."""

from __future__ import annotations

import pytest

from eventhubs_spark.errors import OptionError
from eventhubs_spark.options import (
    STREAM,
    parse_options,
    read_options,
)
from tests.unit.options.test_typed import AUTH_CASES, LIVE_SAS, NS, SP, bad_input_CONN
from tests.unit.support.service_credential import BASE


@pytest.mark.parametrize(("option", "raw"), AUTH_CASES, ids=[f"{i}-{c[0]}" for i, c in enumerate(AUTH_CASES)])
def test_bad_sign_in_options_name_the_option_and_show_an_example(option, raw):
    with pytest.raises(OptionError) as info:
        parse_options(raw, "stream")
    message = str(info.value)
    assert option.lower() in message.lower(), message
    assert info.value.example and info.value.example in message, f"no example in: {message}"
    assert "TOPSECRET" not in message


def test_sign_in_methods_are_implied_by_the_options_given():
    from eventhubs_spark.auth.secret import Secret

    def method(raw):
        return parse_options(raw, "batch").settings.auth_method

    assert method({"eventhubs.connectionString": bad_input_CONN}) == "connectionString"
    assert method({**NS, "eventhubs.sasToken": LIVE_SAS}) == "sasToken"
    assert method({**NS, **SP, "eventhubs.entra.clientSecret": "s"}) == "servicePrincipal"
    assert method({**NS, **SP, "eventhubs.entra.certificatePath": "/c.pem"}) == "servicePrincipal"
    assert method({**NS, "eventhubs.entra.federatedTokenFile": "/t"}) == "workloadIdentity"
    assert method({**NS}) == "defaultAzureCredential"
    assert method({**NS, "eventhubs.auth": "MANAGEDIDENTITY"}) == "managedIdentity"
    sas = LIVE_SAS.removeprefix("SharedAccessSignature ")
    settings = parse_options({**NS, "eventhubs.sasToken": sas}, "batch").settings
    assert settings.sas_token == Secret(LIVE_SAS)  # the prefix is added when left out
    # The checkpoint store by account URL without a SAS token signs in with the Entra identity too.
    settings = parse_options({"eventhubs.connectionString": bad_input_CONN, **SP, "eventhubs.entra.clientSecret": "s",
                                 "eventhubs.checkpointStore.accountUrl": "https://a.blob.core.windows.net",
                                 "eventhubs.checkpointStore.container": "c"}, "stream").settings  # fmt: skip
    assert settings.auth_method == "connectionString" and settings.entra.method == "servicePrincipal"


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
