"""Option values parsed: booleans, counts, durations, sizes, addresses, choices; each error names the option.

Every parser takes ``(option, value)`` and returns the typed value or raises an
:class:`~eventhubs_spark.errors.OptionError` that names the option and shows a valid example, so a spec in
:mod:`~eventhubs_spark.options.specs` needs no message of its own.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable

from eventhubs_spark.auth.settings import host_and_port
from eventhubs_spark.auth.storage import local_path
from eventhubs_spark.errors import OptionError

STREAM, BATCH, WRITE = "stream", "batch", "write"


READ = frozenset({STREAM, BATCH})


ALL = frozenset({STREAM, BATCH, WRITE})


def edit_distance(a: str, b: str, limit: int = 3) -> int:
    """Damerau-Levenshtein distance, or ``limit`` + 1 when it is past ``limit``: a swap of neighbours counts one, and
    an edit may fall between the two letters of a swap (``ca`` -> ``abc`` is 2; the restricted distance, which edits
    no substring twice, says 3 and so missed two-edit typos such as ``vaeenthubs.name``)."""
    if abs(len(a) - len(b)) > limit:
        return limit + 1
    far = len(a) + len(b)
    # d[i + 1][j + 1]: the distance between a[:i] and b[:j]; row and column 0 hold ``far``
    d = [[far] * (len(b) + 2) for _ in range(len(a) + 2)]
    for i in range(len(a) + 1):
        d[i + 1][1] = i
    for j in range(len(b) + 1):
        d[1][j + 1] = j
    last_row: dict[str, int] = {}  # each letter's last row in a
    for i in range(1, len(a) + 1):
        last_col = 0  # the last column in this row where a[i - 1] matched
        for j in range(1, len(b) + 1):
            k, m = last_row.get(b[j - 1], 0), last_col
            same = a[i - 1] == b[j - 1]
            if same:
                last_col = j
            d[i + 1][j + 1] = min(d[i][j] + (0 if same else 1), d[i + 1][j] + 1, d[i][j + 1] + 1,
                                  d[k][m] + (i - k - 1) + 1 + (j - m - 1))  # fmt: skip
        last_row[a[i - 1]] = i
    return min(d[len(a) + 1][len(b) + 1], limit + 1)


def near_value(value: str, allowed: tuple[str, ...]) -> str | None:
    """The allowed value ``value`` is one edit from (in any case), when there is exactly one."""
    text = str(value).strip().lower()
    near = [a for a in allowed if edit_distance(text, a.lower(), 1) <= 1]
    return near[0] if len(near) == 1 else None


def _got(value: str, near: str | None) -> str:
    return f"got {value!r}" + (f" (did you mean {near!r}?)" if near else "")


def parse_bool(option: str, value: str) -> bool:
    text = str(value).strip().lower()
    if text in ("true", "false"):
        return text == "true"
    near = near_value(value, ("true", "false"))
    example = f".option({option!r}, {near or 'true'!r})"
    raise OptionError(f"{option}: expected true or false, {_got(value, near)}. Example: {example}", example)


def count_at_least(minimum: int) -> Callable[[str, str], int]:
    def parse(option: str, value: str) -> int:
        try:
            number = int(str(value).strip())
        except ValueError:
            number = None
        if number is None or number < minimum:
            example = f".option({option!r}, '1000')"
            raise OptionError(
                f"{option}: expected a whole number >= {minimum}, got {value!r}. Example: {example}", example
            )
        return number

    return parse


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|milliseconds?|s|sec|seconds?|m|min|minutes?|h|hours?)?\s*$", re.I)


_ISO = re.compile(r"^P(?:T(?:(\d+(?:\.\d+)?)H)?(?:(\d+(?:\.\d+)?)M)?(?:(\d+(?:\.\d+)?)S)?)$", re.I)


def parse_duration(option: str, value: str) -> float:
    """Seconds from ``"60"``, ``"60s"``, ``"500ms"``, ``"15m"``, ``"1h"`` or ISO-8601 ``"PT1M"``."""
    text = str(value).strip()
    match = _DURATION.match(text)
    if match:
        number, unit = float(match.group(1)), (match.group(2) or "s").lower()
        scale = 0.001 if unit.startswith(("ms", "milli")) else {"m": 60.0, "h": 3600.0}.get(unit[0], 1.0)
        return number * scale
    iso = _ISO.match(text)
    if iso and any(iso.groups()):
        h, m, s = (float(g) if g else 0.0 for g in iso.groups())
        return h * 3600 + m * 60 + s
    example = f".option({option!r}, '60s')"
    raise OptionError(
        f"{option}: expected a duration such as '60s', '500ms', '15m' or 'PT1M', got {value!r}. Example: {example}",
        example,
    )


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(b|kb|k|kib|mb|m|mib|gb|g|gib)?\s*$", re.I)


_UNITS = {"b": 1, "k": 1024, "m": 1024**2, "g": 1024**3}


def parse_size(option: str, value: str) -> int:
    """Bytes from ``"1048576"``, ``"512KB"``, ``"8MB"`` or ``"1g"`` (units of 1024)."""
    match = _SIZE.match(str(value))
    if not match or float(match.group(1)) < 1:
        example = f".option({option!r}, '8MB')"
        raise OptionError(f"{option}: expected a size such as '8MB', '512KB' or '1048576', got {value!r}. "
                          f"Example: {example}", example)  # fmt: skip
    unit = (match.group(2) or "b").lower()[0]
    return int(float(match.group(1)) * _UNITS[unit])


def parse_fraction(option: str, value: str) -> float:
    try:
        number = float(str(value).strip())
    except ValueError:
        number = -1.0
    if not 0.0 <= number <= 1.0:
        example = f".option({option!r}, '0.2')"
        raise OptionError(f"{option}: expected a fraction from 0 to 1, got {value!r}. Example: {example}", example)
    return number


def parse_ports(option: str, value: str) -> str:
    text = str(value).strip()
    low, dash, high = text.partition("-")
    try:
        first, last = int(low), int(high) if dash else int(low)
    except ValueError:
        first, last = -1, -1
    if not (0 <= first <= last <= 65535) or (dash and first == 0):
        example = f".option({option!r}, '20000-20099')"
        raise OptionError(f"{option}: expected a port or a range such as 20000-20099 (0: any free port), got "
                          f"{value!r}. Example: {example}", example)  # fmt: skip
    return f"{first}-{last}" if dash else str(first)


def parse_switch(option: str, value: str) -> bool | None:
    """on/true, off/false, or auto (None: the mode decides)."""
    text = str(value).strip().lower()
    if text in ("on", "true"):
        return True
    if text in ("off", "false"):
        return False
    if text == "auto":
        return None
    example = f".option({option!r}, 'off')"
    raise OptionError(f"{option}: expected on, off or auto (or true, false), got {value!r}. Example: {example}",
                      example)  # fmt: skip


def parse_address(option: str, value: str) -> str:
    """An address to listen on: an IP address (0.0.0.0: all of the host's) or a host name."""
    import ipaddress

    text = str(value).strip()
    with contextlib.suppress(ValueError):
        return str(ipaddress.ip_address(text))
    if re.fullmatch(r"(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}"
                    r"[A-Za-z0-9])?)*", text):  # fmt: skip
        return text
    example = f".option({option!r}, '0.0.0.0')"
    raise OptionError(f"{option}: expected an IP address or a host name to listen on (0.0.0.0: every address), got "
                      f"{value!r}. Example: {example}", example)  # fmt: skip


def parse_local_location(option: str, value: str) -> str:
    """A checkpoint location the driver's Python process can write to (see :func:`auth.storage.local_path`)."""
    text = parse_text(option, value).strip()
    try:
        local_path(text)
    except ValueError as exc:
        example = f".option({option!r}, '/dbfs/checkpoints/telemetry')"
        raise OptionError(f"{option}: {exc}. Example: {example}", example) from None
    return text


def choice_of(*allowed: str) -> Callable[[str, str], str]:
    """One of ``allowed`` (spelt as documented) in any case, given back in lower case; an error names them as
    documented, the value as given, and the one it is an edit away from."""
    lowered = {a.lower() for a in allowed}

    def parse(option: str, value: str) -> str:
        text = str(value).strip().lower()
        if text not in lowered:
            near = near_value(value, allowed)
            example = f".option({option!r}, {near or allowed[0]!r})"
            raise OptionError(
                f"{option}: expected one of {', '.join(allowed)}, {_got(value, near)}. Example: {example}", example
            )
        return text

    return parse


def upper_choice_of(*allowed: str) -> Callable[[str, str], str]:
    """One of ``allowed`` in any case, given back as spelt there (Spark's reader modes are upper case)."""
    lower = choice_of(*(a.lower() for a in allowed))
    by_lower = {a.lower(): a for a in allowed}

    def parse(option: str, value: str) -> str:
        return by_lower[lower(option, value)]

    return parse


def parse_auth_method(option: str, value: str) -> str:
    from eventhubs_spark.auth.settings import AUTH_METHODS

    by_lower = {m.lower(): m for m in AUTH_METHODS}
    text = str(value).strip().lower()
    if text not in by_lower:
        near = near_value(value, tuple(AUTH_METHODS))
        example = f".option({option!r}, {near or 'servicePrincipal'!r})"
        raise OptionError(
            f"{option}: expected one of {', '.join(AUTH_METHODS)}, {_got(value, near)}. Example: {example}", example
        )
    return by_lower[text]


def parse_namespace(option: str, value: str) -> str:
    """``NAMESPACE.servicebus.windows.net`` (host[:port]); a pasted ``sb://.../`` endpoint is accepted."""
    namespace = host_and_port(str(value).strip(), allow_path=False)
    if namespace is None:
        example = f".option({option!r}, 'NAMESPACE.servicebus.windows.net')"
        raise OptionError(f"{option}: expected a fully qualified namespace, got {value!r}. Example: {example}", example)
    return namespace


def parse_sas_token(option: str, value: str) -> str:
    """A ``SharedAccessSignature sr=..&sig=..&se=..&skn=..`` token; the prefix may be left out. An
    expired token is refused here, not after a minute of failed connection attempts."""
    import time
    import urllib.parse

    text = str(value).strip()
    body = text.removeprefix("SharedAccessSignature").strip()
    fields = dict(urllib.parse.parse_qsl(body, keep_blank_values=True))
    token = "SharedAccessSignature sr=NAMESPACE.servicebus.windows.net%2Fhub&sig=SIG&se=1900000000&skn=listen"
    example = f".option({option!r}, {token!r})"
    missing = [f for f in ("sr", "sig", "se") if not fields.get(f)]
    if missing:
        raise OptionError(
            f"{option}: the token lacks {', '.join(missing)} (the token is not shown). Example: {example}", example
        )
    try:
        expiry = int(fields["se"])
    except ValueError:
        raise OptionError(f"{option}: se= must be a Unix time in seconds. Example: {example}", example) from None
    if expiry <= time.time():
        import datetime as dt

        when = dt.datetime.fromtimestamp(expiry, tz=dt.timezone.utc).isoformat()
        raise OptionError(
            f"{option}: the token expired at {when} (se={expiry}); issue one that outlives the query, or sign in "
            f"with Microsoft Entra ID, e.g. .option('eventhubs.auth', 'managedIdentity')",
            ".option('eventhubs.auth', 'managedIdentity')",
        )
    return "SharedAccessSignature " + body


def parse_authority(option: str, value: str) -> str:
    text = str(value).strip().rstrip("/")
    if "://" in text and not text.startswith("https://"):
        example = f".option({option!r}, 'https://login.microsoftonline.us')"
        raise OptionError(f"{option}: the authority must be https, got {value!r}. Example: {example}", example)
    return text


def parse_json_schema(option: str, value: str) -> str:
    """A JSON read's fixed schema, checked here (DDL or a schema's JSON), kept as the text given."""
    from eventhubs_spark.json_bodies.types import parse_schema

    text = parse_text(option, value)
    try:
        parse_schema(text)
    except (ValueError, KeyError, TypeError) as exc:
        example = f".option({option!r}, 'id bigint, device string, reading struct<temp:double>')"
        raise OptionError(f"{option}: {exc}. Example: {example}", example) from None
    return text


def parse_write_id(option: str, value: str) -> str:
    """A name that is a folder's and a stamp's part: letters, digits, '.', '_' and '-'."""
    text = parse_text(option, value).strip()
    if not re.fullmatch(r"[A-Za-z0-9._-]+", text) or text in (".", ".."):
        example = f".option({option!r}, 'orders-2026-11-28')"
        raise OptionError(f"{option}: letters, digits, '.', '_' and '-' only, got {value!r}. Example: {example}",
                          example)  # fmt: skip
    return text


def parse_text(option: str, value: str) -> str:
    if not str(value).strip():
        raise OptionError(f"{option}: must not be empty")
    return str(value)


def parse_transport(option: str, value: str) -> str:
    from eventhubs_spark.auth.network import TRANSPORTS

    by_lower = {t.lower(): t for t in TRANSPORTS}
    text = str(value).strip().lower()
    if text not in by_lower:
        example = f".option({option!r}, 'amqpWebSockets')"
        raise OptionError(f"{option}: expected amqp or amqpWebSockets, got {value!r}. Example: {example}", example)
    return by_lower[text]


def parse_host(option: str, value: str) -> str:
    text = str(value).strip()
    host = host_and_port(text, allow_path=False)
    if host is None or ":" in host:
        example = f".option({option!r}, 'proxy.example.com')"
        raise OptionError(f"{option}: expected a host name or address without a port, got {value!r}. "
                          f"Example: {example}", example)  # fmt: skip
    return host


def parse_port(option: str, value: str) -> int:
    try:
        number = int(str(value).strip())
    except ValueError:
        number = 0
    if not 0 < number < 65536:
        example = f".option({option!r}, '3128')"
        raise OptionError(f"{option}: expected a port from 1 to 65535, got {value!r}. Example: {example}", example)
    return number


def parse_endpoint(option: str, value: str) -> str:
    """``sb://host[:port]`` from that, ``host[:port]``, or an amqps://, wss:// or https:// address."""
    text = str(value).strip().rstrip("/")
    address = host_and_port(text.split("://", 1)[1] if "://" in text else text, allow_path=False)
    if address is None:
        example = f".option({option!r}, 'sb://eventhubs-gateway.internal.example.com:443')"
        raise OptionError(f"{option}: expected sb://host[:port], got {value!r}. Example: {example}", example)
    return f"sb://{address}"


def parse_ca_file(option: str, value: str) -> str:
    import os

    path = str(value).strip()
    if not os.path.isfile(path):
        example = f".option({option!r}, '/Volumes/main/certs/company-ca.pem')"
        raise OptionError(f"{option}: no file {path!r} here; it must be a PEM bundle present on every node, e.g. "
                          f"{example}", example)  # fmt: skip
    return path


def parse_capture_location(option: str, value: str) -> str:
    from eventhubs_spark.capture.store import check_location

    return check_location(value.strip(), option)


def parse_capture_name_format(option: str, value: str) -> str:
    from eventhubs_spark.capture.names import NameFormat

    return NameFormat(value, option).text
