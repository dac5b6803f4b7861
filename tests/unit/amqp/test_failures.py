"""Unit tests of :mod:`eventhubs_spark.amqp.failures`."""

from __future__ import annotations

import pytest

from eventhubs_spark.amqp import failures
from eventhubs_spark.auth.settings import parse_connection_string
from eventhubs_spark.errors import (
    AuthenticationFailedError,
    HubNotFoundError,
)
from tests.unit.support.errors import _as_the_sdk_raises, _link_error, _token_refused

SETTINGS = parse_connection_string(
    "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=n;SharedAccessKey=SECRETKEY;EntityPath=hub"
)


def test_a_refused_sign_in_deep_in_a_chain_becomes_one_clear_error():
    with pytest.raises(AuthenticationFailedError) as info, failures.sign_in_errors(SETTINGS):
        try:
            raise _as_the_sdk_raises(_token_refused(401))
        except Exception as exc:
            raise RuntimeError("while opening the link") from exc
    text = str(info.value)
    assert "eventhubs.auth=connectionString" in text and "SECRETKEY" not in text
    assert info.value.__suppress_context__, "the SDK's chain is left out"


def test_a_missing_consumer_group_is_named_with_its_option_and_how_to_create_it():
    from eventhubs_spark.errors import ConsumerGroupNotFoundError

    said = "The messaging entity 'sb://ns.servicebus.windows.net/hub/consumergroups/nosuchgroup' could not be found."
    with pytest.raises(ConsumerGroupNotFoundError) as info, failures.sign_in_errors(SETTINGS):
        raise RuntimeError("while opening the link") from _link_error(b"amqp:not-found", said)
    text = str(info.value)
    assert text.startswith("consumer group 'nosuchgroup' was not found in event hub"), text
    assert "eventhubs.consumerGroup" in text and "consumer-group create" in text and "--name nosuchgroup" in text
    assert isinstance(info.value, HubNotFoundError) and not info.value.retriable


def test_a_missing_hub_and_other_errors_pass_through_sign_in_errors_as_they_should():
    with pytest.raises(HubNotFoundError), failures.sign_in_errors(SETTINGS):
        raise _token_refused(404)
    with pytest.raises(HubNotFoundError), failures.sign_in_errors(SETTINGS):
        raise _link_error(b"amqp:not-found", "consumer group")
    with pytest.raises(ValueError, match="unrelated"), failures.sign_in_errors(SETTINGS):
        raise ValueError("unrelated")


def test_an_identity_that_issues_no_token_is_a_refused_sign_in():
    """azure-identity's refusals carry no AMQP condition: they are told by their (azure-core) type."""
    from azure.core.exceptions import ClientAuthenticationError
    from azure.identity import CredentialUnavailableError

    with pytest.raises(AuthenticationFailedError, match="AADSTS7000215"), failures.sign_in_errors(SETTINGS):
        raise ClientAuthenticationError("AADSTS7000215: Invalid client secret provided.")
    with pytest.raises(AuthenticationFailedError, match="no managed identity"), failures.sign_in_errors(SETTINGS):
        raise CredentialUnavailableError("no managed identity endpoint is available")
    with failures.sign_in_errors(SETTINGS), pytest.raises(ValueError):  # anything else passes through as itself
        raise ValueError("not a sign-in")
