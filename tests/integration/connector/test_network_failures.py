"""What each failure to reach a namespace means, from the real libraries' real exceptions.

Every failure here really happens, on loopback: a TLS handshake with a certificate for another name or
one nobody trusts, a port that does not speak TLS, a refused port, a name that does not resolve, an
HTTP proxy that answers CONNECT with 407 or 403, a proxy that is not there, and a WebSocket handshake
answered with 404, each met by the library the SDK uses for it (``ssl``/``socket`` for AMQP over TLS,
websocket-client for the SDK's AMQP over WebSockets, aiohttp for its asynchronous clients). What they
raise is then wrapped as the SDK wraps it, and :func:`network_failure` must name what to change."""

from __future__ import annotations

import asyncio
import pickle
import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import aiohttp
import pytest
import trustme
import websocket
from azure.eventhub._pyamqp.error import AuthenticationException, ErrorCondition

from eventhubs_spark.amqp import failures
from eventhubs_spark.amqp.network_errors import network_failure
from eventhubs_spark.auth.network import HttpProxy, NetworkSettings
from eventhubs_spark.auth.settings import parse_connection_string
from eventhubs_spark.errors import NetworkError
from tests.conftest import free_port

NAMESPACE = "myns.servicebus.windows.net"
DIRECT = NetworkSettings()


def proxied(port: int) -> NetworkSettings:
    return NetworkSettings(transport="amqpWebSockets", proxy=HttpProxy("127.0.0.1", port))


@contextmanager
def tcp_server(answer: Callable[[socket.socket], None], wrap: ssl.SSLContext | None = None) -> Iterator[int]:
    """A loopback server that runs ``answer`` on each connection (in a thread); yields its port."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    stop = threading.Event()

    def serve() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            try:
                if wrap is not None:
                    conn = wrap.wrap_socket(conn, server_side=True)
                answer(conn)
            except (OSError, ssl.SSLError):
                pass
            finally:
                conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield port
    finally:
        stop.set()
        thread.join(5)
        server.close()


def http_answer(status_line: bytes) -> Callable[[socket.socket], None]:
    def answer(conn: socket.socket) -> None:
        conn.settimeout(5)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(4096)
            if not chunk:
                return
            data += chunk
        conn.sendall(status_line + b"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")

    return answer


def tls_context(hosts: list[str], directory: str) -> tuple[ssl.SSLContext, str]:
    """A server context with a certificate for ``hosts`` (trustme's), and the authority a client trusts."""
    authority = trustme.CA()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    authority.issue_cert(*hosts).configure_cert(context)
    ca_file = f"{directory}/ca.pem"
    authority.cert_pem.write_to_path(ca_file)
    return context, ca_file


def raised(call: Callable[[], object]) -> BaseException:
    try:
        call()
    except BaseException as exc:  # the library's own exception, whatever it is
        return exc
    raise AssertionError("the call did not fail")


def tls_connect(port: int, host: str, cafile: str | None) -> None:
    context = ssl.create_default_context(cafile=cafile)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        context.wrap_socket(raw, server_hostname=host).close()


def ws_connect(url: str, proxy_port: int | None = None) -> None:
    kwargs = {"http_proxy_host": "127.0.0.1", "http_proxy_port": proxy_port, "proxy_type": "http"} if proxy_port else {}
    websocket.create_connection(url, timeout=5, subprotocols=["AMQPWSB10"], **kwargs).close()


def aio_connect(url: str, proxy_port: int | None = None) -> None:
    async def go() -> None:
        proxy = f"http://127.0.0.1:{proxy_port}" if proxy_port else None
        timeout = aiohttp.ClientTimeout(total=5)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            async with session.ws_connect(url, proxy=proxy, protocols=("AMQPWSB10",)):
                pass

    asyncio.run(go())


def as_the_sdk_wraps(exc: BaseException) -> BaseException:
    """The SDK's WebSocket transport raises ``ConnectionError(...) from`` what websocket-client raised."""
    try:
        raise ConnectionError(f"Websocket failed to establish connection: {exc!r}") from exc
    except ConnectionError as wrapped:
        return wrapped


def check(exc: BaseException, network: NetworkSettings, words: list[str], retriable: bool) -> NetworkError:
    found = network_failure(as_the_sdk_wraps(exc), NAMESPACE, network)
    assert isinstance(found, NetworkError), f"{type(exc).__name__}: {exc} was not told as a network failure"
    for word in words:
        assert word in str(found), (word, str(found))
    assert found.retriable is retriable
    assert pickle.loads(pickle.dumps(found)).retriable is retriable  # crosses from the receiver service as it is
    return found


def test_a_certificate_for_another_name(tmp_path):
    context, cafile = tls_context(["other.example"], str(tmp_path))
    with tcp_server(lambda conn: None, wrap=context) as port:
        exc = raised(lambda: tls_connect(port, "localhost", cafile))
    assert isinstance(exc, ssl.SSLCertVerificationError) and exc.verify_code == 62
    check(exc, DIRECT, ["does not name that host", "eventhubs.customEndpointAddress"], False)


def test_a_certificate_nobody_trusts(tmp_path):
    context, _ = tls_context(["localhost"], str(tmp_path))
    with tcp_server(lambda conn: None, wrap=context) as port:
        exc = raised(lambda: tls_connect(port, "localhost", None))
        aio = raised(lambda: aio_connect(f"wss://localhost:{port}/$servicebus/websocket"))
    assert isinstance(exc, ssl.SSLCertVerificationError) and exc.verify_code != 62
    check(exc, DIRECT, ["not trusted", "eventhubs.connectionVerify"], False)
    assert isinstance(aio, aiohttp.ClientConnectorCertificateError)
    check(aio, DIRECT, ["not trusted", "eventhubs.connectionVerify"], False)


def at_once(data: bytes) -> Callable[[socket.socket], None]:
    """Answer the first bytes that come (a TLS client hello) with ``data``."""

    def answer(conn: socket.socket) -> None:
        conn.settimeout(5)
        if conn.recv(4096):
            conn.sendall(data)

    return answer


def test_a_port_that_does_not_speak_tls():
    with tcp_server(at_once(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")) as port:
        exc = raised(lambda: tls_connect(port, "localhost", None))
    assert isinstance(exc, ssl.SSLError) and not isinstance(exc, ssl.SSLCertVerificationError)
    check(exc, DIRECT, ["TLS handshake", "eventhubs.transportType"], False)


def test_a_refused_port_in_each_library():
    port = free_port()
    for exc in (
        raised(lambda: socket.create_connection(("127.0.0.1", port), timeout=5)),
        raised(lambda: ws_connect(f"ws://127.0.0.1:{port}/$servicebus/websocket")),
        raised(lambda: aio_connect(f"ws://127.0.0.1:{port}/$servicebus/websocket")),
    ):
        check(exc, DIRECT, [f"{NAMESPACE}:5671", "amqpWebSockets"], True)
    plain = check(raised(lambda: socket.create_connection(("127.0.0.1", port))), DIRECT, ["refused"], True)
    assert "refused the connection" in str(plain)


def test_a_name_that_does_not_resolve_in_each_library():
    host = "no-such-namespace.invalid"
    exceptions = [
        raised(lambda: socket.create_connection((host, 5671), timeout=5)),
        raised(lambda: ws_connect(f"ws://{host}/$servicebus/websocket")),
        raised(lambda: aio_connect(f"ws://{host}/$servicebus/websocket")),
    ]
    assert isinstance(exceptions[0], socket.gaierror)
    assert isinstance(exceptions[1], websocket.WebSocketAddressException)
    assert isinstance(exceptions[2], aiohttp.ClientConnectorDNSError)
    for exc in exceptions:
        check(exc, DIRECT, ["cannot resolve", "eventhubs.namespace"], True)


@pytest.mark.parametrize(
    ("status", "words"),
    [
        (b"407 Proxy Authentication Required", ["asks for credentials", "eventhubs.httpProxy.username"]),
        (b"403 Forbidden", ["refused to connect", "status 403", "CONNECT"]),
    ],
)
def test_a_proxy_that_refuses_the_connect(status, words):
    with tcp_server(http_answer(b"HTTP/1.1 " + status)) as proxy:
        exceptions = [
            raised(lambda: ws_connect(f"wss://{NAMESPACE}/$servicebus/websocket", proxy)),
            raised(lambda: aio_connect(f"wss://{NAMESPACE}/$servicebus/websocket", proxy)),
        ]
    assert isinstance(exceptions[0], websocket.WebSocketProxyException)
    assert isinstance(exceptions[1], aiohttp.ClientHttpProxyError)
    for exc in exceptions:
        check(exc, proxied(proxy), [f"127.0.0.1:{proxy}", *words], False)


def test_a_proxy_that_is_not_there():
    proxy = free_port()
    exceptions = [
        raised(lambda: ws_connect(f"wss://{NAMESPACE}/$servicebus/websocket", proxy)),
        raised(lambda: aio_connect(f"wss://{NAMESPACE}/$servicebus/websocket", proxy)),
    ]
    assert isinstance(exceptions[1], aiohttp.ClientProxyConnectionError)
    for exc in exceptions:
        check(exc, proxied(proxy), [f"cannot reach the HTTP proxy 127.0.0.1:{proxy}", "eventhubs.httpProxy.port"], True)


def test_a_websocket_handshake_answered_with_404():
    with tcp_server(http_answer(b"HTTP/1.1 404 Not Found")) as port:
        exceptions = [
            raised(lambda: ws_connect(f"ws://127.0.0.1:{port}/$servicebus/websocket")),
            raised(lambda: aio_connect(f"ws://127.0.0.1:{port}/$servicebus/websocket")),
        ]
    assert isinstance(exceptions[0], websocket.WebSocketBadStatusException)
    assert isinstance(exceptions[1], aiohttp.WSServerHandshakeError)
    for exc in exceptions:
        check(exc, DIRECT, ["status 404", "/$servicebus/websocket"], False)


def test_a_connection_closed_during_the_websocket_handshake():
    with tcp_server(lambda conn: conn.recv(4096)) as port:
        exc = raised(lambda: ws_connect(f"ws://127.0.0.1:{port}/$servicebus/websocket"))
    assert isinstance(exc, websocket.WebSocketConnectionClosedException)
    check(exc, DIRECT, ["WebSocket handshake", "eventhubs.transportType"], True)


def test_other_errors_are_not_network_failures():
    assert network_failure(ValueError("bad"), "ns", DIRECT) is None
    assert network_failure(TimeoutError(), "ns", DIRECT) is None  # a request's own time-out, not a connect
    assert network_failure(raised(lambda: asyncio.run(asyncio.wait_for(asyncio.sleep(1), 0.01))), "ns", DIRECT) is None


def test_the_sdk_reporting_a_failed_connect_as_a_failed_sign_in_is_seen_through():
    """The SDK's WebSocket transport raises its AuthenticationException around websocket-client's address
    error; a real refusal at sign-in (no network cause) stays a sign-in error."""
    settings = parse_connection_string(
        f"Endpoint=sb://{NAMESPACE}/;SharedAccessKeyName=k;SharedAccessKey=s;EntityPath=hub"
    )
    inner = raised(lambda: ws_connect("ws://no-such-namespace.invalid/$servicebus/websocket"))
    wrapped = AuthenticationException(ErrorCondition.ClientError, description=f"Failed: {inner}", error=inner)
    assert isinstance(failures.failure(settings, wrapped), NetworkError)  # pyamqp keeps it as inner_error
    try:  # and the SDK's transport raises it from the original too
        raise wrapped from inner
    except AuthenticationException as exc:
        assert isinstance(failures.failure(settings, exc), NetworkError)
    refused = AuthenticationException(ErrorCondition.UnauthorizedAccess, description="CBS token error: 401")
    assert "could not sign in" in str(failures.failure(settings, refused))


def test_a_wrong_emulator_port_is_named_as_given_and_not_blamed_on_tls():
    """Issue 49: the emulator on one port, the connection string naming another: the error names that host and
    port and plain AMQP (not 5671 and TLS), says the port refused, and does not send the user to WebSockets."""
    from eventhubs_spark.amqp.failures import failure

    port = free_port()
    settings = parse_connection_string(f"Endpoint=sb://127.0.0.1:{port};SharedAccessKeyName=k;SharedAccessKey=s;"
                                       "EntityPath=hub;UseDevelopmentEmulator=true")  # fmt: skip
    exc = raised(lambda: socket.create_connection(("127.0.0.1", port), timeout=5))
    found = failure(settings, as_the_sdk_wraps(exc))
    assert isinstance(found, NetworkError)
    text = str(found)
    assert f"127.0.0.1:{port} (plain AMQP" in text and "refused the connection" in text, text
    # the port drawn may itself hold the digits 5671 (45671 did once): look for TLS's port outside it
    rest = text.replace(f"127.0.0.1:{port}", "127.0.0.1:PORT")
    assert "5671" not in rest and "TLS" not in rest and "amqpWebSockets" not in text and "Endpoint" in text, text
    # a real namespace whose TLS port refuses: WebSockets on 443 is worth suggesting there
    real = f"Endpoint=sb://{NAMESPACE}/;SharedAccessKeyName=k;SharedAccessKey=s;EntityPath=hub"
    tls = failure(parse_connection_string(real), as_the_sdk_wraps(exc))
    assert isinstance(tls, NetworkError) and ":5671 (AMQP over TLS)" in str(tls) and "amqpWebSockets" in str(tls)


def test_a_first_connection_refused_fails_within_seconds_but_a_namespace_once_reached_is_retried(monkeypatch):
    """Issue 49: a wrong host or port (the very first connection refused) fails the query within 30 s by default,
    naming the host and port given, not after eventhubs.operationTimeout's 5 minutes; a namespace this process has
    reached is retried to the end as before."""
    import time

    from eventhubs_spark.amqp import failures as failures_module
    from eventhubs_spark.source import EventHubsStreamReader

    port = free_port()
    conn = f"Endpoint=sb://127.0.0.1:{port};SharedAccessKeyName=k;SharedAccessKey=s;EntityPath=hub;" \
        "UseDevelopmentEmulator=true"  # fmt: skip
    reader = EventHubsStreamReader({"eventhubs.connectionString": conn})
    started = time.monotonic()
    with pytest.raises(Exception) as failed:
        reader.initialOffset()
    took = time.monotonic() - started
    assert took < 30, f"{took:.0f} s to fail"
    assert f"127.0.0.1:{port} (plain AMQP" in str(failed.value) and "refused" in str(failed.value), failed.value

    settings = parse_connection_string(conn)
    # what follows is an executor's process, which retries a refusal for the grace period (a driver's fails at once,
    # and this process became one when the reader above planned)
    monkeypatch.setattr(failures_module, "_grace", failures_module.FIRST_CONNECT_GRACE)
    clock = [0.0]
    refused = NetworkError("refused", retriable=True, wrong_address=True)
    retry = failures_module.give_up_early(settings, clock=lambda: clock[0])
    assert retry(refused)
    clock[0] = failures_module.FIRST_CONNECT_GRACE + 1
    assert not retry(refused)  # never reached: given up
    failures_module.reached(settings)
    try:
        assert failures_module.give_up_early(settings, clock=lambda: clock[0])(refused)
        clock[0] += 1000
        assert retry(refused)  # once reached, a refusal is retried to the deadline
    finally:
        failures_module._REACHED.discard(settings.namespace)
