"""Unit tests of :mod:`eventhubs_spark.amqp.network_errors`."""

from __future__ import annotations

import socket
import ssl

from eventhubs_spark.amqp.network_errors import causes, classify, network_failure
from eventhubs_spark.auth.network import NetworkSettings
from eventhubs_spark.errors import NetworkError

NS = "ns.servicebus.windows.net"


def test_causes_walk_the_whole_chain_once_outermost_first():
    inner = ConnectionRefusedError("refused")
    middle = RuntimeError("wrapped")
    middle.__cause__ = inner
    outer = ValueError("outer")
    outer.__context__ = middle
    outer.error = inner  # type: ignore[attr-defined]  # as the SDK's errors keep what they wrap
    assert causes(outer) == [outer, middle, inner]


def test_each_kind_of_failure_to_get_through_names_what_to_change():
    plain = NetworkSettings()
    unresolved = classify(socket.gaierror(-2, "Name or service not known"), NS, plain)
    assert isinstance(unresolved, NetworkError) and "cannot resolve" in str(unresolved) and unresolved.wrong_address
    refused = classify(ConnectionRefusedError(111, "Connection refused"), NS, plain)
    assert isinstance(refused, NetworkError) and "refused the connection" in str(refused) and refused.retriable
    mismatch = ssl.SSLCertVerificationError("hostname mismatch")
    mismatch.verify_code = 62  # X509_V_ERR_HOSTNAME_MISMATCH
    named = classify(mismatch, NS, plain)
    assert named is not None and "eventhubs.customEndpointAddress" in str(named)
    untrusted = ssl.SSLCertVerificationError("self-signed")
    untrusted.verify_code = 19
    said = classify(untrusted, NS, plain)
    assert said is not None and "eventhubs.connectionVerify" in str(said)
    assert classify(ValueError("something else"), NS, plain) is None


def test_a_failure_deep_in_a_chain_is_found_and_anything_else_is_none():
    outer = RuntimeError("the SDK's own error")
    outer.__cause__ = ConnectionRefusedError(111, "Connection refused")
    found = network_failure(outer, NS, NetworkSettings())
    assert isinstance(found, NetworkError) and NS.split(".")[0] in str(found)
    assert network_failure(RuntimeError("no network in it"), NS, NetworkSettings()) is None
