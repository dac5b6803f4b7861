"""A local Microsoft Entra ID token service, so Entra sign-in runs end to end on one machine.

Azure-identity's real credentials talk to it unchanged: ``ClientSecretCredential`` and
``CertificateCredential`` (OAuth2 client credentials, with a secret or a certificate-signed
assertion), ``WorkloadIdentityCredential`` (a federated token file), and ``ManagedIdentityCredential``
through the App Service protocol (``IDENTITY_ENDPOINT`` + ``IDENTITY_HEADER``). The tokens it issues
are JWTs the emulator accepts on ``$cbs`` (audience Event Hubs) and Azurite accepts in its ``basic``
OAuth mode (audience Storage, issuer ``https://sts.windows.net/<tenant>/``).

MSAL insists on an https authority, so the service runs TLS with a certificate generated at start:
point ``REQUESTS_CA_BUNDLE`` at :attr:`LocalEntra.ca_file` in the processes that sign in (the
executors too) and pass ``authority_host`` with instance discovery disabled. Tokens are PyJWT's and
certificates trustme's (``eventhubs-spark[emulator]``). A development tool: it checks signatures,
audiences and expiry, not role assignments.
"""

from __future__ import annotations

import hmac
import json
import os
import secrets
import shutil
import ssl
import tempfile
import threading
import time
import urllib.parse
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt

from .tls import client_certificate, generate

EVENTHUBS_AUDIENCE = "https://eventhubs.azure.net"
ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"


@dataclass
class _Client:
    secret: str | None = None
    certificate_pem: bytes | None = None  # public certificate of a service principal
    federated: bool = False  # a workload identity: accepts this service's federated tokens


@dataclass
class LocalEntra:
    """One tenant's token endpoint on ``https://127.0.0.1:<port>``; register clients, then :meth:`start`."""

    tenant_id: str = "00000000-0000-0000-0000-00000000e17a"
    host: str = "127.0.0.1"
    clients: dict[str, _Client] = field(default_factory=dict)
    managed_identity_id: str = "11111111-0000-0000-0000-00000000001d"
    identity_header: str = field(default_factory=lambda: secrets.token_hex(8))
    token_lifetime: int = 3600
    issued: list[dict[str, Any]] = field(default_factory=list)  # claims of every token issued
    issued_tokens: list[str] = field(default_factory=list)  # the tokens themselves (tests search logs for them)
    _key: bytes = field(default_factory=lambda: secrets.token_bytes(32))
    _server: ThreadingHTTPServer | None = None
    _dir: str = field(default_factory=lambda: tempfile.mkdtemp(prefix="local-entra-"))

    # -- registration --
    def add_secret_client(self, client_id: str, secret: str) -> None:
        self.clients[client_id] = _Client(secret=secret)

    def add_certificate_client(self, client_id: str) -> str:
        """Registers a client with a fresh certificate; returns the path of its PEM (key + certificate)."""
        key_pem, cert_pem = client_certificate(client_id)
        self.clients[client_id] = _Client(certificate_pem=cert_pem)
        path = os.path.join(self._dir, f"{client_id}.pem")
        with open(path, "wb") as f:
            f.write(key_pem + cert_pem)
        return path

    def add_workload_client(self, client_id: str) -> str:
        """Registers a workload identity; returns the path of a federated token file for it."""
        self.clients[client_id] = _Client(federated=True)
        now = int(time.time())
        claims = {"iss": "local-kubernetes", "sub": f"system:serviceaccount:default:{client_id}",
                  "aud": "api://AzureADTokenExchange", "iat": now, "exp": now + 86400}  # fmt: skip
        path = os.path.join(self._dir, f"{client_id}.token")
        with open(path, "w", encoding="utf-8") as f:
            f.write(self._sign(claims))
        return path

    # -- addresses --
    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("LocalEntra is not started")
        return int(self._server.server_address[1])

    @property
    def authority(self) -> str:
        return f"https://{self.host}:{self.port}"

    @property
    def identity_endpoint(self) -> str:
        """``IDENTITY_ENDPOINT`` for ManagedIdentityCredential (with ``IDENTITY_HEADER`` = :attr:`identity_header`)."""
        return f"{self.authority}/msi/token"

    @property
    def ca_file(self) -> str:
        """The authority of the service's certificate: trust it with REQUESTS_CA_BUNDLE."""
        return os.path.join(self._dir, "tls-ca.pem")

    @property
    def cert_file(self) -> str:
        """The certificate the service presents (valid for its host and localhost; Azurite can reuse it)."""
        return os.path.join(self._dir, "tls-cert.pem")

    @property
    def key_file(self) -> str:
        return os.path.join(self._dir, "tls-key.pem")

    # -- lifecycle --
    def start(self) -> LocalEntra:
        certificate = generate(self.host, self._dir, names=[self.host, "localhost"])
        # one file clients trust with REQUESTS_CA_BUNDLE (the CA), one the server (and Azurite) presents
        for source, target in ((certificate.ca_file, self.ca_file), (certificate.cert_file, self.cert_file),
                               (certificate.key_file, self.key_file)):  # fmt: skip
            shutil.copyfile(source, target)
        server = ThreadingHTTPServer((self.host, 0), _handler(self))
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.cert_file, self.key_file)
        server.socket = context.wrap_socket(server.socket, server_side=True)
        self._server = server
        threading.Thread(target=server.serve_forever, name="local-entra", daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> LocalEntra:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- tokens --
    def _sign(self, claims: dict[str, Any]) -> str:
        return jwt.encode(claims, self._key, algorithm="HS256")

    def access_token(self, client_id: str, resource: str) -> tuple[str, int]:
        now = int(time.time())
        claims = {
            "aud": resource.removesuffix("/.default").rstrip("/"),
            "iss": f"https://sts.windows.net/{self.tenant_id}/",
            "tid": self.tenant_id,
            "appid": client_id,
            "oid": str(uuid.uuid5(uuid.NAMESPACE_URL, client_id)),
            "iat": now,
            "nbf": now - 60,
            "exp": now + self.token_lifetime,
        }
        self.issued.append(claims)
        token = self._sign(claims)
        self.issued_tokens.append(token)
        return token, now + self.token_lifetime

    def verify(self, token: str, audience: str = EVENTHUBS_AUDIENCE) -> str | None:
        """None when ``token`` is a live token of this service for ``audience``; else why not."""
        try:
            claims = jwt.decode(token, self._key, algorithms=["HS256"], options={"verify_aud": False})
        except jwt.InvalidSignatureError:
            return "InvalidSignature: the token was not issued by this tenant"
        except jwt.ExpiredSignatureError:
            return "ExpiredToken: the token is expired"
        except jwt.InvalidTokenError:
            return "InvalidToken: not a JWT"
        # the service compares audiences without a trailing slash (PyJWT's own check would not)
        if str(claims.get("aud", "")).rstrip("/") != audience.rstrip("/"):
            return f"InvalidAudience: the token is for {claims.get('aud')!r}, not {audience!r}"
        return None

    def _client_credentials(self, form: dict[str, str]) -> tuple[int, dict[str, Any]]:
        client_id = form.get("client_id", "")
        client = self.clients.get(client_id)
        if client is None:
            return 400, {"error": "unauthorized_client", "error_description": f"AADSTS700016: {client_id} not found"}
        assertion = form.get("client_assertion")
        if client.secret is not None:
            if not hmac.compare_digest(form.get("client_secret", ""), client.secret):
                return 401, {"error": "invalid_client", "error_description": "AADSTS7000215: Invalid client secret"}
        elif assertion is None or form.get("client_assertion_type") != ASSERTION_TYPE:
            return 401, {"error": "invalid_client", "error_description": "AADSTS7000216: client_assertion required"}
        elif client.certificate_pem is not None:
            problem = _verify_certificate_assertion(assertion, client.certificate_pem)
            if problem:
                return 401, {"error": "invalid_client", "error_description": f"AADSTS700027: {problem}"}
        elif self._verify_federated(assertion):
            return 401, {"error": "invalid_client", "error_description": "AADSTS70021: no matching federated token"}
        scope = form.get("scope", "").split()[0] if form.get("scope") else ""
        token, expires = self.access_token(client_id, scope)
        return 200, {"token_type": "Bearer", "expires_in": expires - int(time.time()),
                     "ext_expires_in": expires - int(time.time()), "access_token": token}  # fmt: skip

    def _verify_federated(self, assertion: str) -> str | None:
        try:
            jwt.decode(assertion, self._key, algorithms=["HS256"], options={"verify_aud": False, "require": ["exp"]})
        except jwt.InvalidSignatureError:
            return "bad signature"
        except jwt.ExpiredSignatureError:
            return "expired"
        except jwt.InvalidTokenError:
            return "not a JWT"
        return None


def _verify_certificate_assertion(assertion: str, certificate_pem: bytes) -> str | None:
    """Check a client assertion's signature with the registered certificate (RS256 or PS256, as
    azure-identity signs them), and that it is not expired."""
    from cryptography import x509

    public = x509.load_pem_x509_certificate(certificate_pem).public_key()
    try:
        jwt.decode(assertion, public, algorithms=["RS256", "PS256"], options={"verify_aud": False, "require": ["exp"]})  # type: ignore[arg-type]
    except jwt.InvalidSignatureError:
        return "the client assertion's signature does not match the registered certificate"
    except jwt.ExpiredSignatureError:
        return "the client assertion is expired"
    except jwt.InvalidTokenError as exc:
        return f"the client assertion is not a valid JWT ({exc})"
    return None


def _handler(entra: LocalEntra) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # quiet: tests read stderr
            return

        def _reply(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            url = urllib.parse.urlparse(self.path)
            parts = url.path.strip("/").split("/")
            if url.path.endswith("/.well-known/openid-configuration"):
                tenant = parts[0]
                base = f"{entra.authority}/{tenant}"
                self._reply(200, {
                    "issuer": f"{base}/v2.0",
                    "authorization_endpoint": f"{base}/oauth2/v2.0/authorize",
                    "token_endpoint": f"{base}/oauth2/v2.0/token",
                    "device_authorization_endpoint": f"{base}/oauth2/v2.0/devicecode",
                    "jwks_uri": f"{base}/discovery/v2.0/keys",
                })  # fmt: skip
                return
            if url.path == "/msi/token":
                if self.headers.get("X-IDENTITY-HEADER") != entra.identity_header:
                    self._reply(401, {"error": "invalid_request", "error_description": "bad X-IDENTITY-HEADER"})
                    return
                query = dict(urllib.parse.parse_qsl(url.query))
                client_id = query.get("client_id") or entra.managed_identity_id
                token, expires = entra.access_token(client_id, query.get("resource", ""))
                self._reply(200, {"access_token": token, "expires_on": str(expires), "token_type": "Bearer",
                                  "resource": query.get("resource", ""), "client_id": client_id})  # fmt: skip
                return
            self._reply(404, {"error": "not_found"})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            form = dict(urllib.parse.parse_qsl(self.rfile.read(length).decode()))
            path = urllib.parse.urlparse(self.path).path  # MSAL for Node adds ?client-request-id=... to the URL
            if path.rstrip("/").endswith("/oauth2/v2.0/token") and form.get("grant_type") == "client_credentials":
                self._reply(*entra._client_credentials(form))
                return
            self._reply(400, {"error": "unsupported_grant_type"})

    return Handler
