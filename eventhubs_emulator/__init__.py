"""A local Event Hubs endpoint that speaks real AMQP 1.0, for development and tests.

The official ``azure-eventhub`` SDK (sync and async) connects to it unchanged with a connection string
carrying ``UseDevelopmentEmulator=true`` (plain AMQP). Run it with ``python -m eventhubs_emulator`` or in
process::

    with Emulator({"telemetry": 4}) as emu:
        conn = emu.connection_string("telemetry")
        ...

As the service, it also serves AMQPS (TLS) and AMQP over WebSockets (TLS, path
``/$servicebus/websocket``, subprotocol ``AMQPWSB10``) when given ``tls_port`` and ``websocket_port``
(0 picks free ports), with a certificate it generates (:attr:`Emulator.ca_file` is what clients
trust) or one it is given. Clients reach those ports as they reach a private endpoint: the SDK's
``custom_endpoint_address`` (:attr:`Emulator.tls_endpoint`, :attr:`Emulator.websocket_endpoint`) with
``connection_verify`` set to :attr:`Emulator.ca_file`, and :meth:`Emulator.connection_string` with
``tls=True``.

The in-process object also exposes fault controls for tests (drop connections, detach receivers,
stall or slow a partition, fail management calls, trim a partition), all thread-safe: the server runs
on its own event-loop thread and every call is marshalled onto it.
"""

from __future__ import annotations

from .config import DEFAULT_CONSUMER_GROUP, EmulatorConfig, HubConfig, load_official_config, parse_hub_flag
from .emulator import DEFAULT_KEY, DEFAULT_KEY_NAME, Emulator
from .tls import Certificate

__all__ = [
    "DEFAULT_CONSUMER_GROUP",
    "DEFAULT_KEY",
    "DEFAULT_KEY_NAME",
    "Certificate",
    "Emulator",
    "EmulatorConfig",
    "HubConfig",
    "load_official_config",
    "parse_hub_flag",
]
