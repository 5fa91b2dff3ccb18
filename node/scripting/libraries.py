"""The libraries redis-server bundles for scripts, written in Python for a Lua 5.1 runtime that lacks
them: ``bit`` (LuaBitOp's operations on 32-bit integers) and ``cjson`` (JSON to and from Lua
tables, as lua-cjson shapes them). ``cmsgpack`` and ``struct`` are present but every call of them
raises an error saying they are not supported.

Each library is a dict of Python functions the runtime wraps; a ``LuaView`` is what they need to
read and make Lua values (raw reads, new tables), so that no metamethod runs while they walk a
table. Errors are raised as ``LibraryError``, which the runtime turns into a Lua error.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any, Protocol

__all__ = ["LibraryError", "LuaView", "bit_library", "cjson_library", "unsupported_library"]


class LibraryError(Exception):
    """A library call failed; the text is the Lua error's message."""


class LuaView(Protocol):
    """Raw access to Lua values (no metamethods run)."""

    def kind(self, value: Any) -> str: ...

    def get(self, table: Any, key: Any) -> Any: ...

    def items(self, table: Any) -> list[tuple[Any, Any]]: ...

    def table(self, items: dict[Any, Any] | list[Any]) -> Any: ...

    @property
    def null(self) -> Any: ...


def _tobit(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        if isinstance(value, bytes):
            try:
                value = float(value)
            except ValueError:
                raise LibraryError("bad argument #1 (number expected)") from None
        else:
            raise LibraryError("bad argument #1 (number expected)")
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return 0
        # LuaBitOp adds 2^52+2^51 and keeps the low 32 bits: round half to even.
        value = round(value)
    bits = int(value) & 0xFFFFFFFF
    return bits - (1 << 32) if bits & 0x80000000 else bits


def _u32(value: Any) -> int:
    return _tobit(value) & 0xFFFFFFFF


def _signed(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


def _tohex(value: Any, digits: Any = 8) -> bytes:
    n = _tobit(digits)
    upper = n < 0
    n = min(abs(n), 8)
    text = f"{_u32(value) & ((1 << (4 * n)) - 1) if n < 8 else _u32(value):0{n}x}"[-n:] if n else ""
    return (text.upper() if upper else text).encode()


def _fold(op: Callable[[int, int], int]) -> Callable[..., int]:
    def folded(*values: Any) -> int:
        if not values:
            raise LibraryError("bad argument #1 (number expected)")
        result = _u32(values[0])
        for value in values[1:]:
            result = op(result, _u32(value))
        return _signed(result)

    return folded


def _rol(value: Any, n: Any) -> int:
    v, s = _u32(value), _u32(n) & 31
    return _signed((v << s) | (v >> (32 - s)))


def _ror(value: Any, n: Any) -> int:
    v, s = _u32(value), _u32(n) & 31
    return _signed((v >> s) | (v << (32 - s)))


def _bswap(value: Any) -> int:
    return _signed(int.from_bytes(_u32(value).to_bytes(4, "little"), "big"))


def bit_library() -> dict[str, Callable[..., Any]]:
    """LuaBitOp's ``bit`` module."""
    return {
        "tobit": lambda v: _tobit(v),
        "tohex": _tohex,
        "bnot": lambda v: _signed(~_u32(v)),
        "band": _fold(lambda a, b: a & b),
        "bor": _fold(lambda a, b: a | b),
        "bxor": _fold(lambda a, b: a ^ b),
        "lshift": lambda v, n: _signed(_u32(v) << (_u32(n) & 31)),
        "rshift": lambda v, n: _signed(_u32(v) >> (_u32(n) & 31)),
        "arshift": lambda v, n: _signed(_tobit(v) >> (_u32(n) & 31)),
        "rol": _rol,
        "ror": _ror,
        "bswap": _bswap,
    }


_MAX_DEPTH = 1000
"""lua-cjson's default nesting limit for encoding and decoding."""


def _number_text(value: float) -> str:
    """A number as lua-cjson writes it (``%.14g``)."""
    if math.isnan(value) or math.isinf(value):
        raise LibraryError("Cannot serialise number: must not be NaN or Inf")
    return f"{value:.14g}"


def cjson_library(view: LuaView) -> dict[str, Callable[..., Any]]:
    """lua-cjson's ``encode`` and ``decode``, and ``null``."""

    def encode_value(value: Any, depth: int) -> str:
        if depth > _MAX_DEPTH:
            raise LibraryError(f"Cannot serialise, excessive nesting ({depth})")
        if value is None or value is view.null:
            return "null"
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, int | float):
            return _number_text(float(value))
        if isinstance(value, bytes):
            return (
                json.dumps(value.decode("latin-1")).encode("latin-1").decode("utf-8", "replace")
                if False
                else _string(value)
            )
        if view.kind(value) == "table":
            items = view.items(value)
            keys = [k for k, _ in items]
            if all(isinstance(k, int) and not isinstance(k, bool) and k > 0 for k in keys) and keys:
                size = max(keys)
                if size <= 2 * len(keys) or size <= 10:
                    return (
                        "["
                        + ",".join(
                            encode_value(view.get(value, n), depth + 1) for n in range(1, size + 1)
                        )
                        + "]"
                    )
            if not items:
                return "{}"
            parts = []
            for k, v in items:
                if isinstance(k, bytes):
                    name = _string(k)
                elif isinstance(k, int | float) and not isinstance(k, bool):
                    name = '"' + _number_text(float(k)) + '"'
                else:
                    raise LibraryError("Cannot serialise table: table key must be a number or string")
                parts.append(name + ":" + encode_value(v, depth + 1))
            return "{" + ",".join(parts) + "}"
        raise LibraryError(f"Cannot serialise {view.kind(value)}: type not supported")

    def encode(*values: Any) -> bytes:
        if len(values) != 1:
            raise LibraryError("bad argument #1 to 'encode' (expected 1 argument)")
        return encode_value(values[0], 1).encode("latin-1")

    def to_lua(value: Any) -> Any:
        if value is None:
            return view.null
        if isinstance(value, str):
            return value.encode("utf-8", "surrogatepass")
        if isinstance(value, list):
            return view.table([to_lua(v) for v in value])
        if isinstance(value, dict):
            return view.table({k.encode("utf-8", "surrogatepass"): to_lua(v) for k, v in value.items()})
        if isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        return value

    def decode(*values: Any) -> Any:
        if len(values) != 1 or not isinstance(values[0], bytes | int | float):
            raise LibraryError("bad argument #1 to 'decode' (string expected)")
        text = values[0] if isinstance(values[0], bytes) else str(values[0]).encode()
        try:
            parsed = json.loads(text.decode("utf-8", "surrogateescape"))
        except (ValueError, RecursionError) as exc:
            raise LibraryError("Expected value but found invalid token at character 1") from exc
        return to_lua(parsed)

    return {"encode": encode, "decode": decode}


def _string(data: bytes) -> str:
    """A Lua string as a JSON string (lua-cjson escapes ``/`` too; other bytes pass as they are)."""
    out = ['"']
    for byte in data:
        ch = chr(byte)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch == "/":
            out.append("\\/")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\b":
            out.append("\\b")
        elif ch == "\f":
            out.append("\\f")
        elif byte < 0x20 or byte == 0x7F:
            out.append(f"\\u{byte:04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def unsupported_library(name: str, functions: list[str]) -> dict[str, Callable[..., Any]]:
    """A library whose functions all fail: what a script that uses it gets here."""

    def fail(*values: Any) -> Any:
        raise LibraryError(f"{name} is not supported by this server")

    return dict.fromkeys(functions, fail)
