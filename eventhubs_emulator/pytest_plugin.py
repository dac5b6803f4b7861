"""pytest fixtures for the emulator, as a pytest plugin a test suite opts into, in its conftest.py::

    pytest_plugins = ["eventhubs_emulator.pytest_plugin"]

(or ``pytest -p eventhubs_emulator.pytest_plugin``). It is not registered on install, so it
loads into no other pytest run of an environment that has the package.

* ``eventhubs_emulator`` (session): one running emulator for the whole test session, serving plain
  AMQP, AMQPS and AMQP over WebSockets (each on a free port, TLS with a generated certificate).
* ``eventhub`` (function): a fresh, uniquely named hub with 4 partitions on it (``@pytest.mark.partitions(n)``
  for another count, ``@pytest.mark.geo_replicated`` for a geo-replicated hub), so tests never see
  each other's events. Use ``eventhub.connection_string`` with the SDK or the connector (plain AMQP),
  or ``eventhub.tls_connection_string`` with ``eventhub.tls_endpoint`` (or ``websocket_endpoint``) as
  the custom endpoint address and ``eventhub.ca_file`` as the CA bundle, as a real namespace is reached.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from . import Emulator

_counter = itertools.count()


@dataclass(frozen=True)
class EventHubHandle:
    """A hub on the session's emulator."""

    emulator: Emulator
    name: str
    partitions: int

    @property
    def connection_string(self) -> str:
        return self.emulator.connection_string(self.name)

    @property
    def namespace_connection_string(self) -> str:
        return self.emulator.connection_string()

    @property
    def tls_connection_string(self) -> str:
        """The hub's connection string as a real namespace has it (no port, TLS)."""
        return self.emulator.connection_string(self.name, tls=True)

    @property
    def tls_endpoint(self) -> str:
        return self.emulator.tls_endpoint

    @property
    def websocket_endpoint(self) -> str:
        return self.emulator.websocket_endpoint

    @property
    def ca_file(self) -> str:
        return self.emulator.ca_file


@pytest.fixture(scope="session")
def eventhubs_emulator() -> Iterator[Emulator]:
    with Emulator(tls_port=0, websocket_port=0) as emulator:
        yield emulator


@pytest.fixture
def eventhub(eventhubs_emulator: Emulator, request: pytest.FixtureRequest) -> EventHubHandle:
    marker = request.node.get_closest_marker("partitions")
    partitions = int(marker.args[0]) if marker else 4
    geo = request.node.get_closest_marker("geo_replicated") is not None
    name = f"hub{next(_counter)}"
    eventhubs_emulator.add_hub(name, partitions, consumer_groups=("$Default", "other"), geo_replicated=geo)
    return EventHubHandle(eventhubs_emulator, name, partitions)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "partitions(n): partition count of the `eventhub` fixture's hub")
    config.addinivalue_line("markers", "geo_replicated: the `eventhub` fixture's hub is geo-replicated")
