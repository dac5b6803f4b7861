"""A JSON value's text as Spark writes it into a string field: what ``from_json`` and ``spark.read.json`` give.

Spark reads a non-string value in a string field by copying its tokens through a Jackson generator
(``JacksonParser``: ``generator.copyCurrentStructure(parser)``), so the text follows Jackson's writer, not the
document: compact (no spaces), members in their order, a fraction or exponent number re-written from its double
(Java's ``Double.toString``: ``7.482E-4``, ``1.0E7``, ``100.0``), an integer in its own digits, a character outside
the Basic Multilingual Plane as its two escaped UTF-16 halves (``\\uD83D\\uDE33``), other non-ASCII text as is,
control characters escaped (``\\n``, ``\\u001F``: upper-case hex). A string value itself is taken as it is.
"""

from __future__ import annotations

import math
from decimal import ROUND_HALF_EVEN, Context, Decimal
from typing import Any

_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f"}


def spark_json_text(value: Any) -> str:
    """``value`` (as Python's ``json`` parses it) as Spark's text of it in a string field."""
    out: list[str] = []
    _write(value, out)
    return "".join(out)


def _write(value: Any, out: list[str]) -> None:
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, int):
        out.append(str(value))
    elif isinstance(value, float):
        out.append(java_double(value))
    elif isinstance(value, str):
        _write_string(value, out)
    elif isinstance(value, dict):
        out.append("{")
        for i, (key, item) in enumerate(value.items()):
            if i:
                out.append(",")
            _write_string(str(key), out)
            out.append(":")
            _write(item, out)
        out.append("}")
    elif isinstance(value, list):
        out.append("[")
        for i, item in enumerate(value):
            if i:
                out.append(",")
            _write(item, out)
        out.append("]")
    else:
        raise TypeError(f"not a JSON value: {type(value).__name__}")


def _write_string(text: str, out: list[str]) -> None:
    out.append('"')
    plain = 0
    for i, ch in enumerate(text):
        code = ord(ch)
        if code >= 0x20 and ch not in '"\\' and code < 0x10000:
            continue
        out.append(text[plain:i])
        plain = i + 1
        if code >= 0x10000:  # outside the BMP: Jackson's UTF-8 writer escapes each UTF-16 half
            code -= 0x10000
            out.append(f"\\u{0xD800 + (code >> 10):04X}\\u{0xDC00 + (code & 0x3FF):04X}")
        else:
            out.append(_SHORT_ESCAPES.get(ch) or f"\\u{code:04X}")
    out.append(text[plain:])
    out.append('"')


def java_double(x: float) -> str:
    """``x`` as Java's ``Double.toString`` writes it (the shortest digits that read back as ``x``, as Java 19 and
    later choose them): plain between 10^-3 and 10^7 (``0.001``, ``1234567.0``), else computerized scientific
    notation (``7.482E-4``, ``1.0E7``); ``NaN`` and ``Infinity`` as Jackson quotes them."""
    if math.isnan(x):
        return '"NaN"'
    if math.isinf(x):
        return '"Infinity"' if x > 0 else '"-Infinity"'
    if x == 0.0:
        return "-0.0" if math.copysign(1.0, x) < 0 else "0.0"
    shortest = Decimal(repr(x))
    if len(shortest.normalize().as_tuple().digits) == 1:
        # Java writes at least two digits' worth of choice: of the two-digit decimals that read back as x, the one
        # nearest x's exact value (5e-324 is written 4.9E-324)
        two = Context(prec=2, rounding=ROUND_HALF_EVEN).plus(Decimal(x))
        if float(two) == x:
            shortest = two
    sign, digit_tuple, exponent = shortest.as_tuple()
    digits = "".join(map(str, digit_tuple)).rstrip("0") or "0"
    assert isinstance(exponent, int)
    # value = 0.d1d2... x 10^point: the decimal point stands ``point`` digits after the first digit's left
    point = len(digit_tuple) + exponent
    minus = "-" if sign else ""
    if 1e-3 <= abs(x) < 1e7:
        if point <= 0:
            return f"{minus}0.{'0' * -point}{digits}"
        whole = digits[:point].ljust(point, "0")
        return f"{minus}{whole}.{digits[point:] or '0'}"
    return f"{minus}{digits[0]}.{digits[1:] or '0'}E{point - 1}"
