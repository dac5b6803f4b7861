"""The one retry loop, what SDK errors mean, and the one way a refused sign-in is reported."""

from __future__ import annotations

import pickle

import pytest

from eventhubs_spark.amqp import failures, sdk_internals
from eventhubs_spark.auth.settings import parse_connection_string
from eventhubs_spark.common.retry import RetryPolicy
from eventhubs_spark.errors import (
    ERROR_TYPES,
    AuthenticationFailedError,
    DataLossError,
    EventHubsError,
    EventHubsTimeoutError,
    HubNotFoundError,
    OptionError,
    ReceiverDisconnectedError,
    SinkError,
    TransientError,
    data_loss_error,
)

STEADY = RetryPolicy(jitter=0.0)  # the waits as the policy's table says, without their random shortening

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

    result = STEADY.call(
        attempt, timeout=30, what="x", on_retry=lambda n, e: retried.append(n), clock=clock, sleep=clock.sleep
    )
    assert result == "ok" and retried == [1, 2] and clock.sleeps == [0.1, 0.2]


def test_ends_after_the_timeout_naming_what_the_option_and_the_last_error():
    clock = Clock()

    def attempt(seconds: float) -> None:
        clock.now += 1
        raise TransientError("503 server busy")

    with pytest.raises(EventHubsTimeoutError) as info:
        STEADY.call(attempt, timeout=10, what="management request for hub 'h'", clock=clock, sleep=clock.sleep)
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
        STEADY.call(attempt, timeout=10, what="x", clock=clock, sleep=clock.sleep)
    text = str(info.value)
    assert "last error: the attempt timed out (before it: 503 server busy)" in text, text


def test_a_failure_that_cannot_heal_is_raised_at_once():
    calls = []

    def attempt(seconds: float) -> None:
        calls.append(seconds)
        raise AuthenticationFailedError("wrong key")

    with pytest.raises(AuthenticationFailedError):
        STEADY.call(attempt, timeout=60, what="x", sleep=lambda s: None)
    assert len(calls) == 1


def test_each_attempt_gets_its_share_of_the_deadline():
    clock = Clock()
    shares = []

    def attempt(seconds: float) -> None:
        shares.append(seconds)
        clock.now += seconds
        raise TimeoutError("no answer")

    with pytest.raises(EventHubsTimeoutError):
        STEADY.call(attempt, timeout=300, what="x", attempt_share=1 / 3, max_attempt=30, clock=clock, sleep=clock.sleep)
    assert shares[0] == 30 and len(shares) > 3, "an unanswered attempt is tried again in time"


@pytest.mark.parametrize(
    ("policy", "draws", "waits"),
    [
        (RetryPolicy(initial_delay=0.1, max_delay=2.0, jitter=0.0), [0.5] * 7, [0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0]),
        (RetryPolicy(initial_delay=1.0, max_delay=4.0, jitter=0.5), [0.0, 1.0, 0.5], [1.0, 1.0, 3.0]),
        (RetryPolicy(initial_delay=0.1, max_delay=5.0, jitter=0.2, max_attempts=3), [0.0] * 3, [0.1, 0.2, None]),
    ],
)
def test_the_policys_waits_double_to_the_cap_shortened_by_the_jitter_and_stop_at_the_attempts(policy, draws, waits):
    rng = iter(draws)
    backoff = policy.backoff(rng=lambda: next(rng, 0.5))
    got = [backoff.next_delay() for _ in waits]
    assert [None if g is None else round(g, 9) for g in got] == waits
    backoff.reset()
    assert backoff.tries == 0 and backoff.next_delay() is not None


def test_the_most_attempts_end_a_call_before_its_deadline_naming_the_option():
    calls = []

    def attempt(seconds: float) -> None:
        calls.append(seconds)
        raise TransientError("server busy")

    with pytest.raises(EventHubsTimeoutError, match=r"eventhubs.retry.maxAttempts is 3.*server busy"):
        RetryPolicy(max_attempts=3).call(attempt, timeout=600, what="x", sleep=lambda s: None)
    assert len(calls) == 3


def _link_error(condition: object, description: str = "") -> Exception:
    from azure.eventhub._pyamqp.error import AMQPLinkError

    return AMQPLinkError(condition=condition, description=description)


def _connection_error(condition: object) -> Exception:
    from azure.eventhub._pyamqp.error import AMQPConnectionError

    return AMQPConnectionError(condition=condition, description="closed")


def _token_refused(status: int) -> Exception:
    from azure.eventhub._pyamqp.error import TokenAuthFailure

    return TokenAuthFailure(status, b"refused at put-token")


def _as_the_sdk_raises(inner: Exception) -> Exception:
    """The SDK's wrapping of a pyamqp error: its own type, raised while handling the original."""
    from azure.eventhub._transport._pyamqp_transport import PyamqpTransport

    try:
        raise inner
    except Exception as exc:
        try:
            raise PyamqpTransport._create_eventhub_exception(exc)
        except Exception as wrapped:
            return wrapped
    raise AssertionError("unreachable")


CONDITIONS = [  # (the error as pyamqp reports it, its condition, the connector's type, does a retry help)
    (lambda: _link_error(b"amqp:link:stolen", "epoch '0'"), sdk_internals.STOLEN, ReceiverDisconnectedError, False),
    (lambda: _link_error(b"amqp:unauthorized-access"), sdk_internals.UNAUTHORIZED, AuthenticationFailedError, False),
    (lambda: _link_error(b"amqp:not-found"), sdk_internals.NOT_FOUND, HubNotFoundError, False),
    (lambda: _link_error(b"com.microsoft:argument-out-of-range"), sdk_internals.OUT_OF_RANGE, EventHubsError, False),
    (lambda: _link_error(b"amqp:link:message-size-exceeded"), sdk_internals.TOO_LARGE, SinkError, False),
    (lambda: _link_error(b"amqp:resource-limit-exceeded"), sdk_internals.RESOURCE_LIMIT, TransientError, True),
    (lambda: _connection_error(b"com.microsoft:server-busy"), sdk_internals.SERVER_BUSY, TransientError, True),
    (lambda: _link_error(b"com.microsoft:timeout"), sdk_internals.TIMEOUT, TransientError, True),
    (lambda: _link_error(b"amqp:link:detach-forced", "idle; an epoch receiver"), sdk_internals.DETACH_FORCED,
     TransientError, True),
    (lambda: _connection_error(b"amqp:connection:forced"), sdk_internals.CONNECTION_FORCED, TransientError, True),
    (lambda: _connection_error(b"amqp:internal-error"), sdk_internals.INTERNAL, TransientError, True),
    (lambda: _token_refused(401), sdk_internals.UNAUTHORIZED, AuthenticationFailedError, False),
    (lambda: _token_refused(404), sdk_internals.NOT_FOUND, HubNotFoundError, False),
]  # fmt: skip


@pytest.mark.parametrize(
    ("make", "condition", "kind", "retriable"), CONDITIONS, ids=[f"{c[1]}-{i}" for i, c in enumerate(CONDITIONS)]
)
def test_an_error_means_what_its_amqp_condition_says(make, condition, kind, retriable):
    """By condition (or a put-token's status), never by text: a forced detach that mentions an epoch is not
    a stolen link; and the SDK's wrapping of the error says the same."""
    for error in (make(), _as_the_sdk_raises(make())):
        assert sdk_internals.condition(error) == condition, error
        assert sdk_internals.error_type(error) is kind and kind.retriable is retriable
        assert sdk_internals.is_stolen(error) is (condition == sdk_internals.STOLEN)


def test_an_error_without_a_condition_means_nothing_by_its_text():
    assert sdk_internals.condition(RuntimeError("amqp:link:stolen epoch")) is None
    assert sdk_internals.error_type(ValueError("x")) is None and not sdk_internals.is_stolen("amqp:link:stolen")


def test_timeouts_are_told_by_type():
    import ssl

    assert sdk_internals.is_timeout(TimeoutError("The read operation timed out")) and sdk_internals.is_timeout(
        ssl.SSLWantReadError()
    )
    assert not sdk_internals.is_timeout(OSError("timed out"))  # text is no evidence


def test_the_data_loss_error_names_hub_partition_range_count_and_the_option():
    error = data_loss_error("hub", "3", 10, 25, begins_at=25)
    assert isinstance(error, DataLossError)
    text = str(error)
    assert "'hub' partition 3" in text and "[10, 25)" in text and "15 events" in text and "begins at 25" in text
    assert "failOnDataLoss=false" in text


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


def test_every_error_type_survives_a_trip_to_another_process():
    for name, cls in ERROR_TYPES.items():
        error = cls("message") if cls is not OptionError else OptionError("bad option", example=".option('a', 'b')")
        copy = pickle.loads(pickle.dumps(error))
        assert type(copy) is cls and str(copy) == str(error), name
    assert pickle.loads(pickle.dumps(OptionError("x", example="e"))).example == "e"


def test_register_says_when_the_spark_server_cannot_import_the_package():
    """Under Spark Connect with the package on the client only, registering makes the server unpickle the
    source's class, which fails there: the error says where to install it (a later query's
    DATA_SOURCE_NOT_FOUND says nothing of the kind)."""
    import types

    import pytest

    import eventhubs_spark

    def refuse(_source: object) -> None:
        raise Exception("[PYTHON_DATA_SOURCE_ERROR] ModuleNotFoundError: No module named 'eventhubs_spark'")

    spark = types.SimpleNamespace(dataSource=types.SimpleNamespace(register=refuse))
    with pytest.raises(RuntimeError, match="install the package where the Spark Connect server"):
        eventhubs_spark.register(spark)
    done = types.SimpleNamespace(dataSource=types.SimpleNamespace(register=lambda _s: None))
    eventhubs_spark.register(done)  # a server that has it: nothing to say
