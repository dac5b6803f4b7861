"""Certificates for the emulator's TLS listeners (AMQPS, AMQP over WebSockets) and the local Entra ID.

Every real namespace is reached over TLS, so the emulator serves it too: with a certificate it makes
at start (a self-signed one that is its own CA, valid for the listening address, ``localhost`` and the
machine's name), or with a certificate and key given to it. Clients trust the generated one through
the file :attr:`Certificate.ca_file`: the SDK's ``connection_verify``, the connector's
``eventhubs.connectionVerify``, or ``SSL_CERT_FILE``. Needs ``cryptography`` (azure-storage-blob
already requires it).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import socket
import ssl
import tempfile
from dataclasses import dataclass


@dataclass(frozen=True)
class Certificate:
    """A certificate file (PEM, the chain) and its private key file (PEM)."""

    cert_file: str
    key_file: str

    @property
    def ca_file(self) -> str:
        """What a client trusts: the generated certificate is its own CA (a given one's chain is in it too)."""
        return self.cert_file

    def server_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.cert_file, self.key_file)
        return context


def self_signed(name: str, hosts: list[str] | None = None) -> tuple[bytes, bytes]:
    """A fresh RSA key and a self-signed certificate, PEM; with ``hosts`` (names or IP addresses) it is
    valid for them (subject alternative names) and may sign, so a client can trust it as a CA."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import NameOID

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = dt.datetime.now(dt.timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=30))
    )
    if hosts:
        names: list[x509.GeneralName] = []
        for host in dict.fromkeys(hosts):  # in order, once each
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                names.append(x509.DNSName(host))
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False).add_extension(
            x509.BasicConstraints(ca=True, path_length=None), critical=True
        )
    cert = builder.sign(key, hashes.SHA256())
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return key_pem, cert.public_bytes(serialization.Encoding.PEM)


def generate(listen_host: str, directory: str | None = None) -> Certificate:
    """A certificate for a server on ``listen_host``, written to ``directory`` (a new private one by
    default). Valid for that address, 127.0.0.1, ``localhost`` and this machine's name; a server on
    every address (``0.0.0.0``) is reached by any of them."""
    hosts = [listen_host, "127.0.0.1", "localhost", socket.gethostname()]
    hosts = [h for h in hosts if h and h not in ("0.0.0.0", "::")]
    key_pem, cert_pem = self_signed("eventhubs-emulator", hosts)
    where = directory or tempfile.mkdtemp(prefix="eventhubs-emulator-tls-")
    cert_file, key_file = os.path.join(where, "emulator-cert.pem"), os.path.join(where, "emulator-key.pem")
    with open(cert_file, "wb") as f:
        f.write(cert_pem)
    fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(key_pem)
    return Certificate(cert_file, key_file)
