"""Shared fixtures: Azurite (the real blob service, from node_modules) and one Spark session.

The emulator fixtures (``eventhubs_emulator``, ``eventhub``) come from the package's pytest plugin,
which a test suite opts into (installing the package loads nothing into other pytest runs).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest_plugins = ["eventhubs_emulator.pytest_plugin"]

ROOT = Path(__file__).resolve().parent.parent
# Every Spark the tests start (here and in the processes they run) reads its defaults from this directory: the
# JIT and collector settings that save short-lived JVMs CPU (see the file). One already set is kept.
os.environ.setdefault("SPARK_CONF_DIR", str(ROOT / "tests" / "spark-conf"))
# A hung test says where, in this process and in every Python process it started: tests/dumps/sitecustomize.py
# (first on PYTHONPATH, which Spark passes to its Python workers) makes each dump its threads on SIGUSR1 into a file
# of its own in this folder, and the deadline hook below asks them all shortly before pytest-timeout fails the test.
DUMPS = tempfile.mkdtemp(prefix="eventhubs-tests-dumps-")
os.environ["EVENTHUBS_TESTS_DUMPS"] = DUMPS
os.environ["PYTHONPATH"] = os.pathsep.join(
    [str(ROOT / "tests" / "dumps"), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
)
DUMP_AHEAD = 15.0  # seconds before a test's time-out that every thread's stack is dumped
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
                "--disableTelemetry",  # no usage data sent (nor a getaddrinfo block printed where it cannot be)
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


# ./dev test runs the suite in SHARDS pytest processes side by side (--shard K/N): most tests wait (emulators, Spark's
# triggers, time-outs, retries), so one process or two left the two cores idle a third of the time (sampled). The
# test files are dealt out by their minutes (tests/file_minutes.json, written by python -m tests.durations --weights),
# the longest first, each to the process with the fewest minutes so far, so the processes end about together; a file
# stays whole (its tests share module fixtures). A file not in the weights counts UNKNOWN_MINUTES.
UNKNOWN_MINUTES = 0.3


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--shard", default=None, metavar="K/N",
                     help="./dev test's K-th of N processes: the test files dealt to it by their minutes")  # fmt: skip


def shard_of_files(files: list[str], weights: dict[str, float], shards: int) -> dict[str, int]:
    """Each file's shard (0 to ``shards`` - 1): the longest first, each to the shard with the fewest minutes so far
    (ties: the lower shard), so every process that collected the same files deals them alike."""
    totals = [0.0] * shards
    out: dict[str, int] = {}
    for name in sorted(files, key=lambda f: (-weights.get(f, UNKNOWN_MINUTES), f)):
        k = min(range(shards), key=lambda i: (totals[i], i))
        out[name] = k
        totals[k] += weights.get(name, UNKNOWN_MINUTES)
    return out


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    shard = config.getoption("--shard")
    if shard is None:
        return
    try:
        k, n = (int(x) for x in shard.split("/"))
        if not 1 <= k <= n:
            raise ValueError
    except ValueError:
        raise pytest.UsageError(f"--shard {shard!r}: give K/N with 1 <= K <= N, e.g. --shard 1/3") from None
    from tests.durations import WEIGHTS

    weights = json.loads(WEIGHTS.read_text()) if WEIGHTS.exists() else {}
    files = list(dict.fromkeys(item.nodeid.split("::")[0] for item in items))
    dealt = shard_of_files(files, weights, n)
    keep, drop = [], []
    for item in items:
        (keep if dealt[item.nodeid.split("::")[0]] == k - 1 else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def _command_line(raw: bytes) -> str:
    """As tests/dumps/sitecustomize.py writes a process's command line first in its dump file."""
    return raw.replace(b"\0", b" ").replace(b"\n", b" ").decode("utf-8", "replace")[:500]


def _timeout_of(item: pytest.Item) -> float:
    """The test's time-out as pytest-timeout takes it: its ``timeout`` mark, else the ini's."""
    marker = item.get_closest_marker("timeout")
    if marker is not None:
        value = marker.kwargs.get("timeout", marker.args[0] if marker.args else None)
        if value is not None:
            return float(value)
    return float(item.config.getini("timeout") or 0)


def _dump_everything(test: str) -> None:
    """Every thread's stack: this process's on its stderr, and each Python process started since the run began
    (tests/dumps/sitecustomize.py) into its dump file, printed here with its command line."""
    import faulthandler
    import sys

    print(f"\n==== {test} is about to time out: every thread's stack, here and in the processes started ====",
          file=sys.stderr, flush=True)  # fmt: skip
    faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
    signalled = []
    for name in os.listdir(DUMPS):
        pid = int(name.split(".")[0])
        if pid == os.getpid():
            continue
        try:
            registered = Path(DUMPS, name).read_text(errors="replace").split("\n", 1)[0]
            now = _command_line(Path(f"/proc/{pid}/cmdline").read_bytes())
            if now != registered:  # ended, and its pid may be another process's now: never signalled
                raise ProcessLookupError(pid)
            os.kill(pid, signal.SIGUSR1)
            signalled.append(name)
        except (OSError, ValueError):
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(DUMPS, name))  # ended: its file says nothing new
    time.sleep(1.0)  # each writes its dump from its signal handler
    for name in signalled:
        with contextlib.suppress(OSError):
            text = Path(DUMPS, name).read_text(errors="replace")
            if "Thread" in text or "Current thread" in text:
                print(f"---- process {name[:-4]}: {text}", file=sys.stderr, flush=True)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Every test has a deadline (pytest-timeout: its mark, else the ini's 300 s), and one that reaches it says
    where it hung: DUMP_AHEAD seconds before, every thread's stack here and in the Python processes it started
    (:func:`_dump_everything`), and should this process be stuck in C, faulthandler's own dump of this process."""
    import faulthandler

    timeout = _timeout_of(item)
    timer = None
    if timeout > DUMP_AHEAD:
        timer = threading.Timer(timeout - DUMP_AHEAD, _dump_everything, args=(item.nodeid,))
        timer.daemon = True
        timer.start()
        faulthandler.dump_traceback_later(timeout - DUMP_AHEAD / 2, exit=False)
    try:
        yield
    finally:
        if timer is not None:
            timer.cancel()
            faulthandler.cancel_dump_traceback_later()


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
    from eventhubs_spark.local_spark import local_session

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
        self.upstream = free_port()  # proxy.py itself; clients reach it through the counting front below
        args = [sys.executable, "-m", "proxy", "--hostname", "127.0.0.1", "--port", str(self.upstream),
                "--num-acceptors", "1", "--num-workers", "1", "--log-level", "WARNING"]  # fmt: skip
        if credentials:
            args += ["--basic-auth", credentials]
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                        start_new_session=True)  # fmt: skip
        wait_for_port(self.upstream)
        self.connects: list[tuple[str, bool]] = []  # each CONNECT the proxy was asked for: (target, with credentials)
        self._front = socket.create_server(("127.0.0.1", 0))
        self.port = self._front.getsockname()[1]
        threading.Thread(target=self._accept, name="proxy-front", daemon=True).start()

    def connects_to(self, port: int) -> int:
        """How many tunnels to ``port`` (any host) clients asked this proxy for."""
        return sum(1 for target, _ in self.connects if target.rsplit(":", 1)[-1] == str(port))

    def _accept(self) -> None:
        """Relay each client to proxy.py, noting the request line and whether it carried credentials."""
        while True:
            try:
                client, _ = self._front.accept()
            except OSError:
                return
            threading.Thread(target=self._relay, args=(client,), daemon=True).start()

    def _relay(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(("127.0.0.1", self.upstream))
        except OSError:
            client.close()
            return
        head = b""
        try:
            while b"\r\n\r\n" not in head and len(head) < 65536:
                chunk = client.recv(65536)
                if not chunk:
                    break
                head += chunk
            line = head.split(b"\r\n", 1)[0].decode("latin-1").split()
            if len(line) >= 2 and line[0].upper() == "CONNECT":
                self.connects.append((line[1], b"\nproxy-authorization:" in head.lower()))
            upstream.sendall(head)
        except OSError:
            client.close()
            upstream.close()
            return

        def pump(src: socket.socket, dst: socket.socket) -> None:
            try:
                while data := src.recv(65536):
                    dst.sendall(data)
            except OSError:
                pass
            finally:
                for s in (src, dst):
                    with contextlib.suppress(OSError):
                        s.shutdown(socket.SHUT_RDWR)

        threading.Thread(target=pump, args=(upstream, client), daemon=True).start()
        pump(client, upstream)
        client.close()
        upstream.close()

    def options(self, with_credentials: bool = True) -> dict[str, str]:
        """The connector's options for this proxy."""
        out = {"eventhubs.httpProxy.hostname": "127.0.0.1", "eventhubs.httpProxy.port": str(self.port)}
        if self.credentials and with_credentials:
            user, _, password = self.credentials.partition(":")
            out.update({"eventhubs.httpProxy.username": user, "eventhubs.httpProxy.password": password})
        return out

    def stop(self) -> None:
        self._front.close()
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
