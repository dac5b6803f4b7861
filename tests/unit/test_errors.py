"""The one retry loop, what SDK errors mean, and the one way a refused sign-in is reported."""

from __future__ import annotations

import pickle

import pytest

from eventhubs_spark.auth.settings import parse_connection_string
from eventhubs_spark.errors import (
    ERROR_TYPES,
    AuthenticationFailedError,
    DataLossError,
    EventHubsTimeoutError,
    HubNotFoundError,
    OptionError,
    TransientError,
    call_with_retries,
    data_loss_error,
    link_stolen,
    message_too_large,
)

SETTINGS = parse_connection_string(
    "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=n;SharedAccessKey=SECRETKEY;EntityPath=hub"
)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def test_retries_transient_failures_until_one_succeeds():
    clock = Clock()
    calls: list[float] = []
    retried: list[int] = []

    def attempt(seconds: float) -> str:
        calls.append(seconds)
        if len(calls) < 3:
            raise TransientError("server busy")
        return "ok"

    result = call_with_retries(
        attempt, timeout=30, what="x", on_retry=lambda n, e: retried.append(n), clock=clock, sleep=clock.sleep
    )
    assert result == "ok" and retried == [1, 2] and clock.sleeps == [0.1, 0.2]


def test_ends_after_the_timeout_naming_what_the_option_and_the_last_error():
    clock = Clock()

    def attempt(seconds: float) -> None:
        clock.now += 1
        raise TransientError("503 server busy")

    with pytest.raises(EventHubsTimeoutError) as info:
        call_with_retries(attempt, timeout=10, what="management request for hub 'h'", clock=clock, sleep=clock.sleep)
    text = str(info.value)
    assert text.startswith("management request for hub 'h' did not succeed within eventhubs.operationTimeout (10 s")
    assert "503 server busy" in text and isinstance(info.value.__cause__, TransientError)
    assert clock.now <= 10 + 5, "no wait runs past the deadline"


def test_an_attempt_cut_short_still_shows_what_the_service_said_before():
    """Under load the last attempt may only time out (asyncio's TimeoutError has no text): the message
    says so, and keeps the service's earlier answer."""
    clock = Clock()
    errors = iter([TransientError("503 server busy"), TimeoutError()] * 20)

    def attempt(seconds: float) -> None:
        clock.now += 1
        raise next(errors)

    with pytest.raises(EventHubsTimeoutError) as info:
        call_with_retries(attempt, timeout=10, what="x", clock=clock, sleep=clock.sleep)
    text = str(info.value)
    assert "last error: the attempt timed out (before it: 503 server busy)" in text, text


def test_a_failure_that_cannot_heal_is_raised_at_once():
    calls = []

    def attempt(seconds: float) -> None:
        calls.append(seconds)
        raise AuthenticationFailedError("wrong key")

    with pytest.raises(AuthenticationFailedError):
        call_with_retries(attempt, timeout=60, what="x", sleep=lambda s: None)
    assert len(calls) == 1


def test_each_attempt_gets_its_share_of_the_deadline():
    clock = Clock()
    shares = []

    def attempt(seconds: float) -> None:
        shares.append(seconds)
        clock.now += seconds
        raise TimeoutError("no answer")

    with pytest.raises(EventHubsTimeoutError):
        call_with_retries(
            attempt, timeout=300, what="x", attempt_share=1 / 3, max_attempt=30, clock=clock, sleep=clock.sleep
        )
    assert shares[0] == 30 and len(shares) > 3, "an unanswered attempt is tried again in time"


@pytest.mark.parametrize(
    ("text", "stolen"),
    [
        ("amqp:link:stolen: New receiver 'a' with higher epoch of '0' is created", True),
        ("At least one receiver for the endpoint is created with epoch of '0'", True),
        ("amqp:link:detach-forced: idle timeout", False),
        ("amqp:connection:forced", False),
    ],
)
def test_a_stolen_link_is_told_from_other_detaches(text: str, stolen: bool):
    assert link_stolen(text) is stolen


def test_an_error_condition_decides_without_the_text():
    class SdkError(Exception):
        condition = b"amqp:link:message-size-exceeded"

    assert message_too_large(SdkError("rejected")) and not link_stolen(SdkError("rejected"))


def test_the_data_loss_error_names_hub_partition_range_count_and_the_option():
    error = data_loss_error("hub", "3", 10, 25, begins_at=25)
    assert isinstance(error, DataLossError)
    text = str(error)
    assert "'hub' partition 3" in text and "[10, 25)" in text and "15 events" in text and "begins at 25" in text
    assert "failOnDataLoss=false" in text


def test_a_refused_sign_in_deep_in_a_chain_becomes_one_clear_error():
    class AuthenticationError(Exception):  # the SDK's name for it
        pass

    with pytest.raises(AuthenticationFailedError) as info, SETTINGS.sign_in_errors():
        try:
            raise AuthenticationError("InvalidSignature: The token has an invalid signature.")
        except AuthenticationError as exc:
            raise RuntimeError("while opening the link") from exc
    text = str(info.value)
    assert "eventhubs.auth=connectionString" in text and "InvalidSignature" in text and "SECRETKEY" not in text
    assert info.value.__suppress_context__, "the SDK's chain is left out"


def test_a_missing_hub_and_other_errors_pass_through_sign_in_errors_as_they_should():
    class TokenAuthFailure(Exception):
        pass

    with pytest.raises(HubNotFoundError), SETTINGS.sign_in_errors():
        raise TokenAuthFailure("The messaging entity 'sb://ns/hub' could not be found.")
    with pytest.raises(ValueError, match="unrelated"), SETTINGS.sign_in_errors():
        raise ValueError("unrelated")


def test_every_error_type_survives_a_trip_to_another_process():
    for name, cls in ERROR_TYPES.items():
        error = cls("message") if cls is not OptionError else OptionError("bad option", example=".option('a', 'b')")
        copy = pickle.loads(pickle.dumps(error))
        assert type(copy) is cls and str(copy) == str(error), name
    assert pickle.loads(pickle.dumps(OptionError("x", example="e"))).example == "e"
