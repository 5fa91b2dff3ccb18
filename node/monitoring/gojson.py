"""JSON written the way Go's ``encoding/json`` writes it, for the monitoring endpoints.

Tools built for nats-server (``nats-top``, dashboards, exporters, scripts that compare output) read
these documents, and Python's ``json`` differs from Go's in ways they can notice: Go writes a whole
float without ``.0`` (``"cpu": 0``, ``"auth_timeout": 2``), escapes ``<``, ``>`` and ``&`` (so
``foo.>`` appears as ``"foo.\\u003e"``) and leaves other non-ASCII text as raw UTF-8 (``"321µs"``).

Every string has a form, whatever clients sent: text the node decoded from bytes that were not UTF-8
holds surrogates (``surrogateescape``), as does a lone ``\\ud800`` escape in a client's JSON, and Go
writes each such byte or half-pair as ``\\ufffd``. So does this encoder, so every document is UTF-8
and valid JSON.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from decimal import Decimal
from json.encoder import encode_basestring
from typing import Any

__all__ = ["dumps", "iterencode"]

_GO_ESCAPES = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026"})
_GO_ESCAPES.update({0x2028: "\\u2028", 0x2029: "\\u2029"})
_GO_ESCAPES.update(dict.fromkeys(range(0xD800, 0xE000), "\\ufffd"))
_NEEDS_GO_ESCAPES = re.compile("[<>&\u2028\u2029\ud800-\udfff]")


def _string(text: str) -> str:
    quoted = encode_basestring(text)  # quotes, backslashes and control characters
    return quoted.translate(_GO_ESCAPES) if _NEEDS_GO_ESCAPES.search(quoted) else quoted


def _float(value: float) -> str:
    """Go's float64 encoding: shortest round-trip digits; plain from 1e-6 to 1e21, else ``1e-7``."""
    if not math.isfinite(value):
        raise ValueError(f"{value!r} has no JSON form")
    if value == 0 or 1e-6 <= abs(value) < 1e21:
        text = format(Decimal(repr(value)), "f")
        return text.rstrip("0").rstrip(".") if "." in text else text
    mantissa, exponent = repr(value).split("e")
    return f"{mantissa}e{exponent[0]}{exponent[1:].lstrip('0')}"


def _scalar(value: Any) -> str:
    if isinstance(value, str):
        return _string(value)
    if value is None or isinstance(value, bool):
        return "null" if value is None else "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _float(value)
    if isinstance(value, dict | list | tuple):  # only empty ones get here
        return "{}" if isinstance(value, dict) else "[]"
    raise TypeError(f"{type(value).__name__} has no JSON form")


def iterencode(value: Any, indent: str = "") -> Iterator[str]:
    """``dumps(value)`` in pieces, so a large document can be written a part at a time."""
    if not value or not isinstance(value, dict | list | tuple):
        yield _scalar(value)
        return
    inner = indent + "  "
    opening, closing = ("{", "}") if isinstance(value, dict) else ("[", "]")
    items = value.items() if isinstance(value, dict) else ((None, item) for item in value)
    yield opening
    separator = "\n" + inner
    for key, item in items:
        yield separator if key is None else separator + _string(key) + ": "
        if item and isinstance(item, dict | list | tuple):
            yield from iterencode(item, inner)
        else:
            yield _scalar(item)
        separator = ",\n" + inner
    yield "\n" + indent + closing


def dumps(value: Any) -> str:
    """``json.MarshalIndent(value, "", "  ")``: two-space indent, key order kept, no final newline."""
    return "".join(iterencode(value))
