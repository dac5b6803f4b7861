"""Certificates for the emulator's TLS listeners (AMQPS, AMQP over WebSockets) and the local Entra ID.

Every real namespace is reached over TLS, so the emulator serves it too: with a certificate it makes
at start (issued by a fresh certificate authority of its own, valid for the listening address,
``localhost`` and the machine's name), or with a certificate and key given to it. Clients trust the
generated one through the file :attr:`Certificate.ca_file` (the authority): the SDK's
``connection_verify``, the connector's ``eventhubs.connectionVerify``, or ``SSL_CERT_FILE``. The
certificates are trustme's (a test dependency of the emulator: ``eventhubs-spark[emulator]``), made
for exactly this: real TLS in tests, with an authority nobody else trusts.
"""

from __future__ import annotations

import os
import socket
import ssl
import tempfile
from dataclasses import dataclass


@dataclass(frozen=True)
class Certificate:
    """A certificate file (PEM, the chain) and its private key file (PEM); ``authority_file``: the
    certificate authority that issued it (None for a given certificate: its chain is what clients trust)."""

    cert_file: str
    key_file: str
    authority_file: str | None = None

    @property
    def ca_file(self) -> str:
        """What a client trusts: the authority of a generated certificate, a given certificate's own chain."""
        return self.authority_file or self.cert_file

    def server_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.cert_file, self.key_file)
        return context


def generate(listen_host: str, directory: str | None = None, names: list[str] | None = None) -> Certificate:
    """A certificate for a server on ``listen_host``, written to ``directory`` (a new private one by
    default) with the authority that issued it. Valid for ``names``, by default that address, 127.0.0.1,
    ``localhost`` and this machine's name; a server on every address (``0.0.0.0``) is reached by any of
    them."""
    import trustme

    hosts = names or [listen_host, "127.0.0.1", "localhost", socket.gethostname()]
    hosts = list(dict.fromkeys(h for h in hosts if h and h not in ("0.0.0.0", "::")))
    authority = trustme.CA(organization_name="eventhubs-emulator")
    leaf = authority.issue_cert(*hosts, common_name="eventhubs-emulator")
    where = directory or tempfile.mkdtemp(prefix="eventhubs-emulator-tls-")
    cert_file, key_file = os.path.join(where, "emulator-cert.pem"), os.path.join(where, "emulator-key.pem")
    ca_file = os.path.join(where, "emulator-ca.pem")
    leaf.cert_chain_pems[0].write_to_path(cert_file)
    for more in leaf.cert_chain_pems[1:]:
        more.write_to_path(cert_file, append=True)
    authority.cert_pem.write_to_path(ca_file)
    fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(leaf.private_key_pem.bytes())
    return Certificate(cert_file, key_file, ca_file)


def client_certificate(client_id: str) -> tuple[bytes, bytes]:
    """(private key, certificate), PEM, RSA: what a service principal signs its client assertions with
    (azure-identity's CertificateCredential signs with RS256 or PS256)."""
    import trustme

    leaf = trustme.CA().issue_cert("client.invalid", common_name=f"client {client_id}", key_type=trustme.KeyType.RSA)
    return leaf.private_key_pem.bytes(), leaf.cert_chain_pems[0].bytes()
