"""The records of the scripting runtime, and the small pure helpers they need: EVAL's cached
``Script`` (with its shebang's flags), FUNCTION's ``Library`` and ``Function``, the names and
flags redis-server accepts, and ``Rand48``, the generator behind a script's ``math.random``."""

from __future__ import annotations

import hashlib
from typing import Any, Final

__all__ = [
    "FLAG_NAMES",
    "Function",
    "Library",
    "Rand48",
    "Script",
    "ScriptError",
    "lua_text",
    "parse_shebang",
    "sha1hex",
    "split_args",
    "valid_name",
]

FLAG_NAMES: Final = ("no-writes", "allow-oom", "allow-stale", "no-cluster", "allow-cross-slot-keys")
"""The flags a script's shebang or a registered function may carry."""
_NAME_CHARS: Final = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")


class ScriptError(Exception):
    """A script or library could not be loaded; ``str()`` is the reply's text after ``-ERR ``
    (or a whole ``-CODE ...`` line)."""


class Script:
    """An EVAL script in the cache."""

    __slots__ = ("body", "flags", "function", "sha")

    def __init__(self, sha: str, body: bytes, flags: frozenset[str] | None, function: Any) -> None:
        self.sha = sha
        self.body = body
        self.flags = flags
        """Its shebang's flags (None: no shebang, the compatible mode)."""
        self.function = function


class Function:
    """A function a library registered."""

    __slots__ = ("callback", "description", "flags", "library", "name")

    def __init__(
        self,
        name: bytes,
        library: Library,
        callback: Any,
        description: bytes | None,
        flags: frozenset[str],
    ) -> None:
        self.name = name
        self.library = library
        self.callback = callback
        self.description = description
        self.flags = flags


class Library:
    """A library FUNCTION LOAD loaded: its name, code and functions."""

    __slots__ = ("code", "functions", "name")

    def __init__(self, name: bytes, code: bytes) -> None:
        self.name = name
        self.code = code
        self.functions: dict[bytes, Function] = {}
        """Its functions, by name as registered."""


_ESCAPES: Final = {ord("n"): b"\n", ord("r"): b"\r", ord("t"): b"\t", ord("b"): b"\b", ord("a"): b"\a"}
_HEX: Final = frozenset(b"0123456789abcdefABCDEF")


def split_args(line: bytes) -> list[bytes] | None:
    """A line split into words as redis-server's ``sdssplitargs`` splits it: blanks separate
    words; "..." (with \\xHH and \\n-style escapes) and '...' quote parts of a word; a closing
    quote must end the word. None when quotes are unbalanced."""
    words: list[bytes] = []
    i, n = 0, len(line)
    while True:
        while i < n and line[i] in b" \n\r\t\f\v":
            i += 1
        if i >= n:
            return words
        word = bytearray()
        quote = 0
        while True:
            if quote == 0x22:  # "
                if i >= n:
                    return None
                c = line[i]
                if (
                    c == 0x5C
                    and i + 3 < n
                    and line[i + 1] == 0x78
                    and {line[i + 2], line[i + 3]} <= _HEX
                ):
                    word.append(int(line[i + 2 : i + 4], 16))
                    i += 4
                    continue
                if c == 0x5C and i + 1 < n:
                    word += _ESCAPES.get(line[i + 1], bytes((line[i + 1],)))
                    i += 2
                    continue
                i += 1
                if c == 0x22:
                    if i < n and line[i] not in b" \n\r\t\f\v":
                        return None
                    break
                word.append(c)
            elif quote == 0x27:  # '
                if i >= n:
                    return None
                c = line[i]
                if c == 0x5C and i + 1 < n and line[i + 1] == 0x27:
                    word.append(0x27)
                    i += 2
                    continue
                i += 1
                if c == 0x27:
                    if i < n and line[i] not in b" \n\r\t\f\v":
                        return None
                    break
                word.append(c)
            else:
                if i >= n or line[i] in b" \n\r\t\f\v":
                    break
                c = line[i]
                i += 1
                if c in (0x22, 0x27):
                    quote = c
                else:
                    word.append(c)
        words.append(bytes(word))


def sha1hex(data: bytes) -> str:
    return hashlib.sha1(data).hexdigest()


def parse_shebang(body: bytes) -> tuple[frozenset[str] | None, int]:
    """An EVAL script's shebang: its flags (None without one) and its length.

    Raises:
        ScriptError: a malformed shebang.
    """
    if not body.startswith(b"#!"):
        return None, 0
    end = body.find(b"\n")
    if end < 0:
        raise ScriptError("Invalid script shebang")
    parts = split_args(body[:end])
    if not parts:
        raise ScriptError("Invalid engine in script shebang")
    if parts[0] != b"#!lua":
        raise ScriptError(f"Unexpected engine in script shebang: {parts[0].decode('utf-8', 'replace')}")
    flags: set[str] = set()
    for part in parts[1:]:
        if not part.startswith(b"flags="):
            raise ScriptError(f"Unknown lua shebang option: {part.decode('utf-8', 'replace')}")
        for flag in part[6:].split(b",") if len(part) > 6 else ():  # ("flags=": none)
            name = flag.decode("utf-8", "replace")
            if name not in FLAG_NAMES:
                raise ScriptError(f"Unexpected flag in script shebang: {name}")
            flags.add(name)
    return frozenset(flags), end


def valid_name(name: bytes) -> bool:
    return bool(name) and all(c in _NAME_CHARS for c in name)


def lua_text(value: Any) -> bytes | None:
    """What ``lua_tolstring`` gives for a value: strings and numbers only."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    if number == int(number) and abs(number) < 1e15:
        return b"%d" % int(number)
    return b"%.14g" % number


class Rand48:
    """redis-server's ``redisLrand48``: the 48-bit generator of ``math.random``."""

    __slots__ = ("state",)

    def __init__(self) -> None:
        self.state = 0x1234ABCD330E

    def seed(self, value: int) -> None:
        value &= 0xFFFFFFFF
        self.state = (value << 16) | 0x330E

    def next(self) -> int:
        self.state = (self.state * 0x5DEECE66D + 0xB) & 0xFFFFFFFFFFFF
        return self.state >> 17
