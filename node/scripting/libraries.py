"""The libraries redis-server bundles for scripts, written in Python for a Lua 5.1 runtime that lacks
them: ``bit`` (LuaBitOp's operations on 32-bit integers), ``cjson`` (JSON to and from Lua tables,
as lua-cjson shapes them, with its depth and number settings) and ``cmsgpack`` (MessagePack, with
lua-cmsgpack's choice of encodings). ``struct`` is present but every call of it fails with an error
saying it is not supported.

Each library is a dict of Python functions the runtime wraps; a ``LuaView`` is what they need to
read and make Lua values (raw reads, new tables), so that no metamethod runs while they walk a
table. Errors are raised as ``LibraryError``, which the runtime turns into a Lua error.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Callable
from typing import Any, Final, Protocol

import msgpack

__all__ = [
    "LibraryError",
    "LuaView",
    "bit_library",
    "cjson_library",
    "cmsgpack_library",
    "unsupported_library",
]


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


class _JsonSettings:
    """lua-cjson's settings a script may change (they last as long as the runtime)."""

    def __init__(self) -> None:
        self.encode_max_depth = _MAX_DEPTH
        self.decode_max_depth = _MAX_DEPTH
        self.encode_invalid_numbers = False
        self.precision = 14


def _number_text(value: float, settings: _JsonSettings) -> str:
    """A number as lua-cjson writes it (``%.14g``; NaN and infinities only when allowed)."""
    if math.isnan(value) or math.isinf(value):
        if not settings.encode_invalid_numbers:
            raise LibraryError("Cannot serialise number: must not be NaN or Infinity")
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return f"{value:.{settings.precision}g}"


def _depth(parsed: Any, limit: int, depth: int = 1) -> None:
    """Refuse a decoded document nested deeper than ``limit``."""
    if isinstance(parsed, list | dict):
        if depth > limit:
            raise LibraryError(f"Found too many nested data structures ({depth})")
        for item in parsed.values() if isinstance(parsed, dict) else parsed:
            _depth(item, limit, depth + 1)


def cjson_library(view: LuaView) -> dict[str, Callable[..., Any]]:
    """lua-cjson's ``encode`` and ``decode`` and its settings (``null`` is the runtime's)."""
    settings = _JsonSettings()

    def encode_value(value: Any, depth: int) -> str:
        """``value`` inside ``depth`` tables."""
        if value is None or value is view.null:
            return "null"
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, int | float):
            return _number_text(float(value), settings)
        if isinstance(value, bytes):
            return _string(value)
        if view.kind(value) == "table":
            depth += 1
            if depth > settings.encode_max_depth:
                raise LibraryError(f"Cannot serialise, excessive nesting ({depth})")
            items = view.items(value)
            keys = [k for k, _ in items]
            if keys and all(isinstance(k, int) and not isinstance(k, bool) and k > 0 for k in keys):
                size = max(keys)
                if size <= 2 * len(keys) or size <= 10:
                    return (
                        "["
                        + ",".join(encode_value(view.get(value, n), depth) for n in range(1, size + 1))
                        + "]"
                    )
            if not items:
                return "{}"
            parts = []
            for k, v in items:
                if isinstance(k, bytes):
                    name = _string(k)
                elif isinstance(k, int | float) and not isinstance(k, bool):
                    name = '"' + _number_text(float(k), settings) + '"'
                else:
                    raise LibraryError("Cannot serialise table: table key must be a number or string")
                parts.append(name + ":" + encode_value(v, depth))
            return "{" + ",".join(parts) + "}"
        raise LibraryError(f"Cannot serialise {view.kind(value)}: type not supported")

    def encode(*values: Any) -> bytes:
        if len(values) != 1:
            raise LibraryError("bad argument #1 to 'encode' (expected 1 argument)")
        return encode_value(values[0], 0).encode("latin-1")

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
        _depth(parsed, settings.decode_max_depth)
        return to_lua(parsed)

    def setter(name: str) -> Callable[..., Any]:
        def change(*values: Any) -> Any:
            if values and values[0] is not None:
                value = values[0]
                setattr(settings, name, value if isinstance(value, bool) else int(value))
            return getattr(settings, name)

        return change

    return {
        "encode": encode,
        "decode": decode,
        "encode_max_depth": setter("encode_max_depth"),
        "decode_max_depth": setter("decode_max_depth"),
        "encode_invalid_numbers": setter("encode_invalid_numbers"),
        "encode_number_precision": setter("precision"),
        "encode_keep_buffer": lambda *values: True,
        "decode_invalid_numbers": lambda *values: True,
        "encode_sparse_array": lambda *values: False,
    }


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


_MSGPACK_NESTING: Final = 16
"""lua-cmsgpack's nesting limit: a table deeper than this packs as nil."""


def cmsgpack_library(view: LuaView) -> dict[str, Callable[..., Any]]:
    """lua-cmsgpack's ``pack``, ``unpack``, ``unpack_one`` and ``unpack_limit``, with the encodings
    it chooses (the smallest integer form, float32 when exact, str8 strings, arrays for tables
    whose keys are exactly 1..n)."""

    def pack_value(value: Any, level: int, out: bytearray) -> None:
        if isinstance(value, bool):
            out.append(0xC3 if value else 0xC2)
        elif isinstance(value, int | float):
            pack_number(float(value), out)
        elif isinstance(value, bytes):
            size = len(value)
            if size < 32:
                out.append(0xA0 | size)
            elif size <= 0xFF:
                out += bytes((0xD9, size))
            elif size <= 0xFFFF:
                out += b"\xda" + struct.pack(">H", size)
            else:
                out += b"\xdb" + struct.pack(">I", size)
            out += value
        elif value is not None and view.kind(value) == "table" and level < _MSGPACK_NESTING:
            items = view.items(value)
            keys = [k for k, _ in items]
            sequence = all(
                isinstance(k, int | float) and not isinstance(k, bool) and k == int(k) and k > 0
                for k in keys
            ) and (not keys or max(keys) == len(keys))
            size = len(items)
            if sequence:
                _header(out, size, 0x90, 0xDC, 0xDD)
                for n in range(1, size + 1):
                    pack_value(view.get(value, n), level + 1, out)
            else:
                _header(out, size, 0x80, 0xDE, 0xDF)
                for k, v in items:
                    pack_value(k, level + 1, out)
                    pack_value(v, level + 1, out)
        else:
            out.append(0xC0)

    def pack(*values: Any) -> bytes:
        if not values:
            raise LibraryError("MessagePack pack needs input.")
        out = bytearray()
        for value in values:
            pack_value(value, 0, out)
        return bytes(out)

    def to_lua(value: Any) -> Any:
        if isinstance(value, list):
            return view.table([to_lua(v) for v in value])
        if isinstance(value, dict):
            return view.table({to_lua(k): to_lua(v) for k, v in value.items() if k is not None})
        if isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            return value.encode("utf-8", "surrogateescape")
        return value

    def decode(data: bytes, limit: int, offset: int) -> tuple[int, list[Any]]:
        unpacker = msgpack.Unpacker(raw=True, strict_map_key=False, use_list=True)
        unpacker.feed(data[offset:])
        found: list[Any] = []
        try:
            while limit <= 0 or len(found) < limit:
                found.append(to_lua(unpacker.unpack()))
        except msgpack.OutOfData:
            pass
        except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as exc:
            raise LibraryError("Bad data format in input.") from exc
        end = offset + unpacker.tell()
        return (-1 if end >= len(data) else end), found

    def text(values: tuple[Any, ...]) -> bytes:
        if not values or not isinstance(values[0], bytes):
            raise LibraryError("bad argument #1 to 'unpack' (string expected)")
        return values[0]

    def unpack(*values: Any) -> Any:
        _, found = decode(text(values), 0, 0)
        return tuple(found)

    def unpack_one(*values: Any) -> Any:
        offset = int(values[1]) if len(values) > 1 else 0
        end, found = decode(text(values), 1, offset)
        return (end, *found)

    def unpack_limit(*values: Any) -> Any:
        limit = int(values[1]) if len(values) > 1 else 0
        offset = int(values[2]) if len(values) > 2 else 0
        end, found = decode(text(values), limit, offset)
        return (end, *found)

    return {"pack": pack, "unpack": unpack, "unpack_one": unpack_one, "unpack_limit": unpack_limit}


def pack_number(value: float, out: bytearray) -> None:
    """A number as lua-cmsgpack packs it."""
    if value == value and not math.isinf(value) and value == int(value) and -(2**63) <= value < 2**63:
        n = int(value)
        if n >= 0:
            if n < 128:
                out.append(n)
            elif n <= 0xFF:
                out += bytes((0xCC, n))
            elif n <= 0xFFFF:
                out += b"\xcd" + struct.pack(">H", n)
            elif n <= 0xFFFFFFFF:
                out += b"\xce" + struct.pack(">I", n)
            else:
                out += b"\xcf" + struct.pack(">Q", n)
        elif n >= -32:
            out += struct.pack(">b", n)
        elif n >= -128:
            out += b"\xd0" + struct.pack(">b", n)
        elif n >= -32768:
            out += b"\xd1" + struct.pack(">h", n)
        elif n >= -(2**31):
            out += b"\xd2" + struct.pack(">i", n)
        else:
            out += b"\xd3" + struct.pack(">q", n)
    elif struct.unpack(">f", struct.pack(">f", value))[0] == value or value != value:
        out += b"\xca" + struct.pack(">f", value)
    else:
        out += b"\xcb" + struct.pack(">d", value)


def _header(out: bytearray, size: int, fix: int, sixteen: int, thirty_two: int) -> None:
    if size < 16:
        out.append(fix | size)
    elif size <= 0xFFFF:
        out += bytes((sixteen,)) + struct.pack(">H", size)
    else:
        out += bytes((thirty_two,)) + struct.pack(">I", size)


def unsupported_library(name: str, functions: list[str]) -> dict[str, Callable[..., Any]]:
    """A library whose functions all fail: what a script that uses it gets here."""

    def fail(*values: Any) -> Any:
        raise LibraryError(f"{name} is not supported by this server")

    return dict.fromkeys(functions, fail)
