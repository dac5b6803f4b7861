"""The Schema Registry data plane of an Event Hubs namespace, as the official SDKs call it (REST, api-version
2022-10), served over HTTPS beside the emulator's AMQP listeners.

What the clients ask (``azure-schemaregistry``'s generated operations, and ``@azure/schema-registry``'s):

- ``PUT /$schemaGroups/{group}/schemas/{name}``: register a schema (the body, with ``Content-Type:
  application/json; serialization=Avro``, ``...=Json`` or ``text/plain; charset=utf-8`` for Custom); the same
  content again gets the same id and version, new content a new version;
- ``POST /$schemaGroups/{group}/schemas/{name}:get-id``: the properties of a schema with this content;
- ``GET /$schemaGroups/$schemas/{id}``: a schema by id; ``GET .../schemas/{name}/versions/{n}``: by version;
- ``GET .../schemas/{name}/versions`` (``{"schemaVersions": [...]}``) and ``GET /$schemaGroups``.

Every answer about one schema carries its properties as headers (``Schema-Id``, ``Schema-Group-Name``,
``Schema-Name``, ``Schema-Version``, ``Schema-Id-Location``, ``Location``, ``Content-Type``); an error is
``{"error": {"code", "message"}}`` with the service's status. The registry takes Microsoft Entra ID bearer
tokens only (no shared access signatures), checked by the emulator's ``token_verifier`` where it has one
(e.g. :meth:`eventhubs_emulator.entra.LocalEntra.verify`). A schema group must exist first (as one is created
in the portal): :meth:`SchemaRegistry.add_group`, with the format it holds.
"""

from __future__ import annotations

import json
import re
import ssl
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit

API_VERSION = "2022-10"
FORMATS = {"avro": "Avro", "json": "Json", "custom": "Custom"}
CONTENT_TYPES = {
    "Avro": "application/json; serialization=Avro",
    "Json": "application/json; serialization=Json",
    "Custom": "text/plain; charset=utf-8",
}
MAX_SCHEMA_BYTES = 1024 * 1024  # the service's limit on a schema's size
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,49}$")


@dataclass(frozen=True)
class Schema:
    id: str
    group: str
    name: str
    version: int
    format: str
    content: str


@dataclass
class _Group:
    format: str
    schemas: dict[str, list[Schema]] = field(default_factory=dict)  # name (lower-cased) -> versions


class RegistryError(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def _format_of(content_type: str | None) -> str:
    text = (content_type or "").replace(" ", "").lower()
    if text.startswith("text/plain"):
        return "Custom"
    match = re.search(r"serialization=([a-z]+)", text)
    if match and match.group(1) in FORMATS and text.startswith("application/json"):
        return FORMATS[match.group(1)]
    raise RegistryError(415, "InvalidContentType", f"content type {content_type!r}: expected one of "
                        f"{sorted(CONTENT_TYPES.values())}")  # fmt: skip


def _same(a: Schema, content: str) -> bool:
    """Whether ``content`` is the schema ``a`` (JSON formats compare as JSON, so spacing does not count)."""
    if a.format == "Custom":
        return a.content == content
    try:
        return bool(json.loads(a.content) == json.loads(content))
    except ValueError:
        return a.content == content


class SchemaRegistry:
    """The schemas of one namespace, by group; safe to use from several threads."""

    def __init__(self) -> None:
        self._groups: dict[str, _Group] = {}
        self._by_id: dict[str, Schema] = {}
        self._lock = threading.Lock()

    def add_group(self, name: str, format: str = "Avro") -> None:
        """Create a schema group holding schemas of ``format`` (Avro, Json or Custom)."""
        wanted = FORMATS.get(format.lower())
        if wanted is None:
            raise ValueError(f"schema group format {format!r}: one of Avro, Json, Custom")
        if not _NAME.match(name):
            raise ValueError(f"schema group name {name!r}: letters, digits, '.', '_', '-', 1 to 50 of them")
        with self._lock:
            self._groups.setdefault(name.lower(), _Group(wanted))

    def groups(self) -> list[str]:
        with self._lock:
            return sorted(self._groups)

    def _group(self, name: str) -> _Group:
        group = self._groups.get(name.lower())
        if group is None:
            raise RegistryError(404, "GroupNotFound", f"schema group {name!r} does not exist")
        return group

    def register(self, group_name: str, name: str, format: str, content: str) -> Schema:
        if not _NAME.match(name):
            raise RegistryError(400, "InvalidSchemaName", f"schema name {name!r}: letters, digits, '.', '_', '-'")
        if len(content.encode("utf-8")) > MAX_SCHEMA_BYTES:
            raise RegistryError(413, "SchemaTooLarge", "a schema is at most 1 MB")
        if format != "Custom":
            try:
                json.loads(content)
            except ValueError as exc:
                raise RegistryError(400, "InvalidSchema", f"the schema is not JSON: {exc}") from None
        with self._lock:
            group = self._group(group_name)
            if group.format != format:
                raise RegistryError(415, "InvalidSchemaType", f"schema group {group_name!r} holds {group.format} "
                                    f"schemas, not {format}")  # fmt: skip
            versions = group.schemas.setdefault(name.lower(), [])
            for known in versions:
                if _same(known, content):
                    return known
            schema = Schema(uuid.uuid4().hex, group_name, name, len(versions) + 1, format, content)
            versions.append(schema)
            self._by_id[schema.id] = schema
            return schema

    def find(self, group_name: str, name: str, format: str, content: str) -> Schema:
        with self._lock:
            group = self._group(group_name)
            for known in group.schemas.get(name.lower(), []):
                if known.format == format and _same(known, content):
                    return known
        raise RegistryError(404, "ItemNotFound", f"no schema {name!r} with that content in group {group_name!r}")

    def by_id(self, schema_id: str) -> Schema:
        with self._lock:
            schema = self._by_id.get(schema_id)
        if schema is None:
            raise RegistryError(404, "ItemNotFound", f"no schema with id {schema_id!r}")
        return schema

    def versions(self, group_name: str, name: str) -> list[Schema]:
        with self._lock:
            found = list(self._group(group_name).schemas.get(name.lower(), []))
        if not found:
            raise RegistryError(404, "ItemNotFound", f"no schema {name!r} in group {group_name!r}")
        return found

    def version(self, group_name: str, name: str, version: int) -> Schema:
        for schema in self.versions(group_name, name):
            if schema.version == version:
                return schema
        raise RegistryError(404, "ItemNotFound", f"schema {name!r} has no version {version}")


class RegistryServer:
    """The registry over HTTPS on ``host:port`` (0: a free port), with the emulator's certificate; each
    request must carry a bearer token ``verify`` accepts (``verify(token) -> None`` when good, else why)."""

    def __init__(
        self,
        registry: SchemaRegistry,
        cert_file: str,
        key_file: str,
        host: str = "127.0.0.1",
        port: int = 0,
        verify: Callable[[str], str | None] | None = None,
    ) -> None:
        self.registry = registry
        self.verify = verify
        self._server = ThreadingHTTPServer((host, port), _handler(self))
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert_file, key_file)
        self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        self.port = int(self._server.server_address[1])
        self.requests = 0
        threading.Thread(target=self._server.serve_forever, name="eventhubs-schema-registry", daemon=True).start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def authorize(self, header: str | None) -> None:
        scheme, _, token = (header or "").partition(" ")
        if scheme.lower() != "bearer" or not token:
            raise RegistryError(401, "Unauthorized", "the Schema Registry takes Microsoft Entra ID bearer tokens "
                                "only (no shared access signature)")  # fmt: skip
        if self.verify is not None:
            why = self.verify(token)
            if why is not None:
                raise RegistryError(401, "Unauthorized", why)


def _properties(schema: Schema, base: str) -> dict[str, str]:
    location = f"{base}/$schemaGroups/{schema.group}/schemas/{schema.name}/versions/{schema.version}"
    return {
        "Schema-Id": schema.id,
        "Schema-Group-Name": schema.group,
        "Schema-Name": schema.name,
        "Schema-Version": str(schema.version),
        "Schema-Id-Location": f"{base}/$schemaGroups/$schemas/{schema.id}?api-version={API_VERSION}",
        "Location": f"{location}?api-version={API_VERSION}",
        "Content-Type": CONTENT_TYPES[schema.format],
    }


def _route(
    server: RegistryServer, method: str, path: str, headers: Any, body: bytes, base: str
) -> tuple[int, dict[str, str], bytes]:
    """One request: (status, headers, body)."""
    registry = server.registry
    parts = [unquote(p) for p in urlsplit(path).path.split("/") if p]
    if not parts or parts[0] != "$schemaGroups":
        raise RegistryError(404, "NotFound", f"no such resource: {urlsplit(path).path}")
    rest = parts[1:]
    if method == "GET" and not rest:
        doc = {"schemaGroups": registry.groups()}
        return 200, {"Content-Type": "application/json"}, json.dumps(doc).encode()
    if method == "GET" and len(rest) == 2 and rest[0] == "$schemas":
        schema = registry.by_id(rest[1])
        return 200, _properties(schema, base), schema.content.encode("utf-8")
    if len(rest) >= 3 and rest[1] == "schemas":
        group, name = rest[0], rest[2]
        if method == "PUT" and len(rest) == 3:
            schema = registry.register(group, name, _format_of(headers.get("Content-Type")), body.decode("utf-8"))
            return 204, _properties(schema, base), b""
        if method == "POST" and len(rest) == 3 and name.endswith(":get-id"):
            schema = registry.find(group, name[: -len(":get-id")], _format_of(headers.get("Content-Type")),
                                   body.decode("utf-8"))  # fmt: skip
            return 204, _properties(schema, base), b""
        if method == "GET" and len(rest) == 4 and rest[3] == "versions":
            listed: dict[str, Any] = {"schemaVersions": [s.version for s in registry.versions(group, name)]}
            return 200, {"Content-Type": "application/json"}, json.dumps(listed).encode()
        if method == "GET" and len(rest) == 5 and rest[3] == "versions" and rest[4].isdigit():
            schema = registry.version(group, name, int(rest[4]))
            return 200, _properties(schema, base), schema.content.encode("utf-8")
    raise RegistryError(404, "NotFound", f"no such resource: {method} {urlsplit(path).path}")


def _handler(server: RegistryServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _answer(self) -> None:
            server.requests += 1
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            base = f"https://{self.headers.get('Host') or 'localhost'}"
            try:
                server.authorize(self.headers.get("Authorization"))
                status, headers, payload = _route(server, self.command, self.path, self.headers, body, base)
            except RegistryError as exc:
                status, headers = exc.status, {"Content-Type": "application/json"}
                payload = json.dumps({"error": {"code": exc.code, "message": exc.message}}).encode()
            except (UnicodeDecodeError, ValueError) as exc:
                status, headers = 400, {"Content-Type": "application/json"}
                payload = json.dumps({"error": {"code": "BadRequest", "message": str(exc)}}).encode()
            self.send_response(status)
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            if payload:
                self.wfile.write(payload)

        do_GET = do_PUT = do_POST = _answer

    return Handler
