"""Unit tests of :mod:`eventhubs_emulator.entra`'s token rules (no server started; the real azure-identity
credentials against it in ``tests/integration``)."""

from __future__ import annotations

import time

import jwt

from eventhubs_emulator.entra import ASSERTION_TYPE, EVENTHUBS_AUDIENCE, LocalEntra


def test_a_token_is_for_its_audience_with_or_without_a_trailing_slash_and_no_other():
    entra, other = LocalEntra(), LocalEntra()
    token, expires = entra.access_token("app", "https://eventhubs.azure.net/.default")
    assert expires > time.time() + 3000
    assert entra.verify(token) is None
    assert entra.verify(token, EVENTHUBS_AUDIENCE + "/") is None, "audiences compare without a trailing slash"
    assert entra.verify(token, "https://storage.azure.com").startswith("InvalidAudience")
    assert other.verify(token).startswith("InvalidSignature"), "another tenant's key"
    assert entra.verify("not-a-jwt").startswith("InvalidToken")
    entra.token_lifetime = -120
    expired, _ = entra.access_token("app", "https://eventhubs.azure.net/.default")
    assert entra.verify(expired).startswith("ExpiredToken")
    assert [c["appid"] for c in entra.issued] == ["app", "app"] and entra.issued_tokens[0] == token


def test_client_credentials_take_the_right_secret_or_a_federated_token_of_this_tenant_only():
    entra = LocalEntra()
    entra.add_secret_client("with-secret", "s3cret")
    entra.add_workload_client("workload")
    form = {"client_id": "with-secret", "client_secret": "s3cret", "scope": "https://eventhubs.azure.net/.default"}
    status, body = entra._client_credentials(form)
    assert status == 200 and body["token_type"] == "Bearer" and entra.verify(body["access_token"]) is None
    assert entra._client_credentials({**form, "client_secret": "wrong"})[0] == 401
    assert "not found" in entra._client_credentials({**form, "client_id": "nobody"})[1]["error_description"]

    federated = {"client_id": "workload", "client_assertion_type": ASSERTION_TYPE, "scope": form["scope"]}
    with open(entra.add_workload_client("workload")) as token_file:
        good = token_file.read()
    assert entra._client_credentials({**federated, "client_assertion": good})[0] == 200
    forged = jwt.encode({"sub": "x", "exp": int(time.time()) + 60}, b"another key of 32 bytes or more!!", "HS256")
    assert entra._client_credentials({**federated, "client_assertion": forged})[0] == 401
    assert entra._client_credentials(federated)[0] == 401, "no assertion at all"
