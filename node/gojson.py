"""JSON written the way Go's ``encoding/json`` writes it, for the monitoring endpoints.

Tools built for nats-server (``nats-top``, dashboards, exporters, scripts that compare output) read
these documents, and Python's ``json`` differs from Go's in ways they can notice: Go writes a whole
float without ``.0`` (``"cpu": 0``, ``"auth_timeout": 2``), escapes ``<``, ``>`` and ``&`` (so
``foo.>`` appears as ``"foo.\\u003e"``) and leaves other non-ASCII text as raw UTF-8 (``"321µs"``).
"""

from __future__ import annotations

import json
import math
from decimal import Decimal
from typing import Any

__all__ = ["dumps"]

_GO_ESCAPES = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026"})
_GO_ESCAPES.update({0x2028: "\\u2028", 0x2029: "\\u2029"})


def _string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False).translate(_GO_ESCAPES)


def _float(value: float) -> str:
    """Go's float64 encoding: shortest round-trip digits; plain from 1e-6 to 1e21, else ``1e-7``."""
    if not math.isfinite(value):
        raise ValueError(f"{value!r} has no JSON form")
    if value == 0 or 1e-6 <= abs(value) < 1e21:
        text = format(Decimal(repr(value)), "f")
        return text.rstrip("0").rstrip(".") if "." in text else text
    mantissa, exponent = repr(value).split("e")
    return f"{mantissa}e{exponent[0]}{exponent[1:].lstrip('0')}"


def _encode(value: Any, indent: str, out: list[str]) -> None:
    if isinstance(value, str):
        out.append(_string(value))
    elif value is None or isinstance(value, bool):
        out.append("null" if value is None else "true" if value else "false")
    elif isinstance(value, int):
        out.append(str(value))
    elif isinstance(value, float):
        out.append(_float(value))
    elif isinstance(value, dict):
        if not value:
            out.append("{}")
            return
        inner = indent + "  "
        out.append("{")
        for i, (key, item) in enumerate(value.items()):
            out.append(("," if i else "") + "\n" + inner + _string(key) + ": ")
            _encode(item, inner, out)
        out.append("\n" + indent + "}")
    elif isinstance(value, list | tuple):
        if not value:
            out.append("[]")
            return
        inner = indent + "  "
        out.append("[")
        for i, item in enumerate(value):
            out.append(("," if i else "") + "\n" + inner)
            _encode(item, inner, out)
        out.append("\n" + indent + "]")
    else:
        raise TypeError(f"{type(value).__name__} has no JSON form")


def dumps(value: Any) -> str:
    """``json.MarshalIndent(value, "", "  ")``: two-space indent, key order kept, no final newline."""
    out: list[str] = []
    _encode(value, "", out)
    return "".join(out)
