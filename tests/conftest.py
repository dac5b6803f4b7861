"""Shared fixtures: Azurite (the real blob service, from node_modules) and one Spark session.

The emulator fixtures (``eventhubs_emulator``, ``eventhub``) come from the package's pytest plugin,
which a test suite opts into (installing the package loads nothing into other pytest runs).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest_plugins = ["eventhubs_emulator.pytest_plugin"]

ROOT = Path(__file__).resolve().parent.parent
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout} s")


class Azurite:
    """Azurite's blob service started from the project's node_modules, stopped by its pid."""

    def __init__(self, tls: tuple[str, str] | None = None) -> None:
        """``tls`` = (certificate file, key file): serve https with Azurite's ``basic`` OAuth, so Entra ID
        tokens (e.g. from :class:`LocalEntra`) are accepted besides the account key."""
        self.tls = tls
        binary = ROOT / "node_modules" / ".bin" / "azurite-blob"
        if not binary.exists():
            raise RuntimeError(f"{binary} is missing: run `npm install` in {ROOT} (the README's test command does)")
        self.binary = binary
        self.port = free_port()
        self.location = tempfile.mkdtemp(prefix="azurite-")
        self.start()

    def start(self) -> None:
        """Start (or start again, on the same port and data) the blob service."""
        self.process = subprocess.Popen(
            [
                str(self.binary),
                "--blobHost",
                "127.0.0.1",
                "--blobPort",
                str(self.port),
                "--location",
                self.location,
                "--skipApiVersionCheck",
                "--silent",
                "--loose",
                *(["--cert", self.tls[0], "--key", self.tls[1], "--oauth", "basic"] if self.tls else []),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        wait_for_port(self.port)

    @property
    def connection_string(self) -> str:
        return (
            f"DefaultEndpointsProtocol={self.scheme};AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};"
            f"BlobEndpoint={self.account_url};"
        )

    @property
    def scheme(self) -> str:
        return "https" if self.tls else "http"

    @property
    def account_url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}/{AZURITE_ACCOUNT}"

    def kill(self) -> None:
        """Stop the service, keeping its data (``start()`` brings it back)."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()

    def stop(self) -> None:
        self.kill()
        shutil.rmtree(self.location, ignore_errors=True)


@pytest.fixture(scope="session")
def azurite() -> Iterator[Azurite]:
    service = Azurite()
    try:
        yield service
    finally:
        service.stop()


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """One local Spark session for the whole run (starting one costs about 6 s)."""
    from eventhubs_spark.localspark import local_session

    session = local_session("eventhubs-spark-tests")  # eventhubs_spark/conf/spark-defaults.conf
    session.sparkContext.setLogLevel("WARN")
    try:
        yield session
    finally:
        session.stop()


class ProxyServer:
    """A real HTTP proxy (proxy.py, from PyPI) that tunnels CONNECT and forwards plain HTTP; with
    ``credentials`` ("user:password") it answers 407 to requests without them."""

    def __init__(self, credentials: str | None = None) -> None:
        import sys

        self.credentials = credentials
        self.port = free_port()
        args = [sys.executable, "-m", "proxy", "--hostname", "127.0.0.1", "--port", str(self.port),
                "--num-acceptors", "1", "--num-workers", "1", "--log-level", "WARNING"]  # fmt: skip
        if credentials:
            args += ["--basic-auth", credentials]
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                        start_new_session=True)  # fmt: skip
        wait_for_port(self.port)

    def options(self, with_credentials: bool = True) -> dict[str, str]:
        """The connector's options for this proxy."""
        out = {"eventhubs.httpProxy.hostname": "127.0.0.1", "eventhubs.httpProxy.port": str(self.port)}
        if self.credentials and with_credentials:
            user, _, password = self.credentials.partition(":")
            out.update({"eventhubs.httpProxy.username": user, "eventhubs.httpProxy.password": password})
        return out

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)  # its acceptor processes too
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


@pytest.fixture(scope="session")
def http_proxy() -> Iterator[ProxyServer]:
    proxy = ProxyServer()
    try:
        yield proxy
    finally:
        proxy.stop()


@pytest.fixture(scope="session")
def http_proxy_with_credentials() -> Iterator[ProxyServer]:
    proxy = ProxyServer("spark:proxy-secret-7")
    try:
        yield proxy
    finally:
        proxy.stop()
