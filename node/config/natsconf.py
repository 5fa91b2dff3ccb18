"""nats-server's configuration language, read without I/O.

The language is nats-server's (its ``conf`` package): ``#`` and ``//`` comments; ``key: value``,
``key = value`` or ``key value``; maps in ``{}`` and arrays in ``[]`` whose items end at a comma or
a new line; quoted (``"..."`` with ``\\t \\n \\r \\" \\\\ \\xHH`` escapes, ``'...'`` raw) and unquoted
strings; integers with size suffixes (``K`` is 1000 and ``KB``/``KiB`` 1024, up to ``E``/``EB``);
floats; booleans ``true false yes no on off``; ``include path`` (relative to the including file,
which it does not see the variables of); and ``$name``, the value of a key set earlier in an
enclosing map, else of the environment variable (whose text is read as a value).

Files are read through an injected reader, so a test needs no disk, and what a document may pull in
is bounded (include depth, total bytes), so a hostile file yields a ``ConfError`` and nothing else.
Every key remembers the file and line that set it, for errors found later by the caller.
"""

from __future__ import annotations

import datetime
import posixpath
import re
from collections.abc import Callable, Mapping
from typing import Any

import attrs

__all__ = ["ConfError", "Position", "Table", "parse", "parse_duration", "parse_size"]

MAX_DEPTH = 64
"""Maps, arrays, includes and environment variables nested in one another."""
MAX_BYTES = 4 * 1024 * 1024
"""Text one document may read in all, its includes and environment variables counted."""

Reader = Callable[[str], str]
"""Reads the file at a path; raises OSError or ValueError when it cannot."""


@attrs.frozen
class Position:
    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


class ConfError(ValueError):
    """A document that is not nats-server configuration; the message starts with ``file:line``."""

    def __init__(self, where: Position, message: str) -> None:
        super().__init__(f"{where}: {message}")
        self.where = where
        self.message = message


class Table(dict[str, Any]):
    """A map from a document: its values, where each key was set, and which keys served as
    ``$variables`` (nats-server does not hold those to be options)."""

    def __init__(self) -> None:
        super().__init__()
        self.positions: dict[str, Position] = {}
        self.variables: set[str] = set()


_BOOLEANS = {"true": True, "yes": True, "on": True, "false": False, "no": False, "off": False}
_SIZE_UNITS: dict[str, int] = {
    **{p: 1000**i for i, p in enumerate("kmgtpe", 1)},
    **{p + s: 1024**i for i, p in enumerate("kmgtpe", 1) for s in ("b", "i", "ib")},
}
_INTEGER = re.compile(r"-?[0-9]+")
_SIZE = re.compile(r"(-?[0-9]+)([a-zA-Z]+)")
_FLOAT = re.compile(r"-?[0-9]+\.[0-9]+")
_DATETIME = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z")
_INT64 = 2**63
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", '"': '"', "\\": "\\"}
_BCRYPT = ("$2a$", "$2b$", "$2y$")
"""What begins a bcrypt hash (a password or token), which is no variable."""
_VALUE_END = frozenset(" \t\r\n,;]}")
_KEY_END = frozenset(" \t\r\n:={[")


def parse_size(text: str) -> int | None:
    """``"2MB"`` in bytes by nats-server's units (``K`` 1000, ``KB``/``KiB`` 1024), None if it is
    not a size."""
    match = _SIZE.fullmatch(text.strip())
    if match is None or len(match[1]) > 20 or match[2].lower() not in _SIZE_UNITS:
        return None
    return int(match[1]) * _SIZE_UNITS[match[2].lower()]


_DURATION_UNITS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
_DURATION_PART = re.compile(r"([0-9]*\.?[0-9]*)(ns|us|µs|μs|ms|s|m|h)")


def parse_duration(text: str) -> float | None:
    """Go's ``time.ParseDuration`` syntax (``"1h30m"``, ``"1.5s"``, ``"500ms"``) in seconds, as
    nats-server reads durations; None if it is not one."""
    sign, body = (-1.0, text[1:]) if text[:1] == "-" else (1.0, text.removeprefix("+"))
    if body == "0":
        return 0.0
    total, at = 0.0, 0
    while at < len(body):
        match = _DURATION_PART.match(body, at)
        if match is None or match[1] in ("", "."):
            return None
        total += float(match[1]) * _DURATION_UNITS[match[2]]
        at = match.end()
    return sign * total if body else None


def parse(
    text: str,
    *,
    file: str = "<config>",
    read: Reader | None = None,
    env: Mapping[str, str] | None = None,
) -> Table:
    """The top-level map of a document.

    Raises:
        ConfError: the text, an include or a variable is not valid configuration.
    """
    budget = _Budget(MAX_BYTES)
    budget.spend(len(text), Position(file, 1))
    context = _Context(read, env or {}, budget, set())
    return _Parser(text, file, context, (file,), 0).document()


@attrs.define
class _Budget:
    left: int

    def spend(self, size: int, where: Position) -> None:
        self.left -= size
        if self.left < 0:
            raise ConfError(where, f"configuration larger than {MAX_BYTES} bytes in all")


@attrs.frozen
class _Context:
    """What every file and variable of one document shares."""

    read: Reader | None
    env: Mapping[str, str]
    budget: _Budget
    expanding: set[str]
    """Environment variables being read, to refuse one that refers to itself."""


class _Parser:
    """One file (or one environment variable's text): a recursive descent over its characters."""

    def __init__(
        self, text: str, file: str, context: _Context, files: tuple[str, ...], depth: int
    ) -> None:
        self.text = text
        self.file = file
        self.context = context
        self.files = files
        """The chain of includes that led here, to refuse a cycle."""
        self.depth = depth
        self.at = 0
        self.line = 1
        self.scopes: list[Table] = []

    # -- characters

    def error(self, message: str) -> ConfError:
        return ConfError(Position(self.file, self.line), message)

    def peek(self) -> str:
        return self.text[self.at] if self.at < len(self.text) else ""

    def advance(self) -> str:
        char = self.text[self.at]
        self.at += 1
        if char == "\n":
            self.line += 1
        return char

    def skip(self, *, newlines: bool) -> None:
        """Past spaces and comments, and new lines if asked."""
        while self.at < len(self.text):
            char = self.text[self.at]
            if char in " \t\r" or (newlines and char == "\n"):
                self.advance()
            elif char == "#" or self.text.startswith("//", self.at):
                end = self.text.find("\n", self.at)
                self.at = len(self.text) if end < 0 else end
            else:
                return

    def describe(self) -> str:
        char = self.peek()
        return "end of file" if not char else "new line" if char == "\n" else repr(char)

    # -- structure

    def document(self) -> Table:
        self.skip(newlines=True)
        if self.peek() == "{":  # the whole document may sit in braces
            self.advance()
            table = self.map_body("}")
            self.advance()
            self.skip(newlines=True)
            if self.peek():
                raise self.error(f"unexpected {self.describe()} after the closing '}}'")
            return table
        return self.map_body("")

    def map_body(self, closing: str) -> Table:
        """Entries up to ``closing`` (left unread), or the end of the text when it is empty."""
        table = Table()
        self.scopes.append(table)
        while True:
            self.skip(newlines=True)
            char = self.peek()
            if not char and closing:
                raise self.error(f"unexpected end of file, expected {closing!r}")
            if char == closing:
                self.scopes.pop()
                return table
            if char in "}],;":
                raise self.error(f"unexpected {self.describe()}")
            self.entry(table)
            self.skip(newlines=False)
            char = self.peek()
            if char in ("\n", ",", ";"):
                self.advance()
            elif char != closing:
                raise self.error(f"expected a new line, ',' or ';' after a value, got {self.describe()}")

    def entry(self, table: Table) -> None:
        line = self.line
        quoted = self.peek() in "\"'"
        key = self.key()
        if not quoted and key.lower() == "include" and self.peek() in (" ", "\t"):
            self.include(table)
            return
        self.skip(newlines=False)
        if self.peek() in (":", "="):
            self.advance()
            self.skip(newlines=False)
        table[key] = self.value()
        table.positions[key] = Position(self.file, line)

    def key(self) -> str:
        char = self.peek()
        if char in ("'", '"'):
            self.advance()
            end = self.text.find(char, self.at)
            if end < 0:
                raise self.error("unterminated quoted key")
            return self.take(end, skip=1)
        start = self.at
        while self.at < len(self.text) and self.text[self.at] not in _KEY_END:
            self.at += 1
        if self.at == start:
            raise self.error(f"expected a key, got {self.describe()}")
        return self.text[start : self.at]

    def take(self, end: int, *, skip: int = 0) -> str:
        """The text from here to ``end``, then past ``skip`` more characters."""
        text = self.text[self.at : end]
        self.line += text.count("\n")
        self.at = end + skip
        return text

    def value(self) -> Any:
        if self.depth >= MAX_DEPTH:
            raise self.error(f"nested deeper than {MAX_DEPTH}")
        char = self.peek()
        if char == "[":
            return self.nested(self.array)
        if char == "{":
            self.advance()
            table = self.nested(lambda: self.map_body("}"))
            self.advance()
            return table
        if char == '"':
            return self.double_quoted()
        if char == "'":
            self.advance()
            end = self.text.find("'", self.at)
            if end < 0:
                raise self.error("unterminated string")
            return self.take(end, skip=1)
        if char == "(":
            return self.block()
        if not char or char in _VALUE_END:
            raise self.error(f"expected a value, got {self.describe()}")
        return self.unquoted()

    def nested(self, read: Callable[[], Any]) -> Any:
        self.depth += 1
        try:
            return read()
        finally:
            self.depth -= 1

    def array(self) -> list[Any]:
        self.advance()
        items: list[Any] = []
        while True:
            self.skip(newlines=True)
            if self.peek() == "]":
                self.advance()
                return items
            if not self.peek():
                raise self.error("unexpected end of file, expected ']'")
            items.append(self.value())
            self.skip(newlines=False)
            char = self.peek()
            if char in (",", "\n"):
                self.advance()
            elif char != "]":
                raise self.error(f"expected ',' or ']' after an array item, got {self.describe()}")

    def double_quoted(self) -> str:
        self.advance()
        parts: list[str] = []
        while True:
            char = self.advance() if self.at < len(self.text) else ""
            if not char:
                raise self.error("unterminated string")
            if char == '"':
                return "".join(parts)
            if char != "\\":
                parts.append(char)
                continue
            escape = self.advance() if self.at < len(self.text) else ""
            if escape == "x":
                digits = self.text[self.at : self.at + 2]
                if not re.fullmatch(r"[0-9a-fA-F]{2}", digits):
                    raise self.error(f"expected two hexadecimal digits after '\\x', got {digits!r}")
                parts.append(chr(int(digits, 16)))
                self.at += 2
            elif escape in _ESCAPES:
                parts.append(_ESCAPES[escape])
            else:
                raise self.error(f'invalid escape {escape!r}: only \\xHH \\t \\n \\r \\" \\\\')

    def block(self) -> str:
        """``( ... )`` with the ``)`` alone on its line: the text between, unchanged."""
        self.advance()
        at = self.at
        while True:
            end = self.text.find("\n)", at)
            if end < 0:
                raise self.error("unterminated block: expected ')' alone on a line")
            if self.text[end + 2 : end + 3] in ("", "\n"):
                return self.take(end, skip=2)
            at = end + 1

    def unquoted(self) -> Any:
        start = self.at
        while self.at < len(self.text) and self.text[self.at] not in _VALUE_END:
            self.at += 1
        word = self.text[start : self.at]
        if word.lower() in _BOOLEANS:
            return _BOOLEANS[word.lower()]
        if word.startswith("$") and not word.startswith(_BCRYPT):
            return self.variable(word[1:])
        if word[0] not in "-0123456789":
            return word
        if _INTEGER.fullmatch(word):
            return self.int64(int(word) if len(word) <= 20 else _INT64, word)
        size = parse_size(word)
        if size is not None:
            return self.int64(size, word)
        if _FLOAT.fullmatch(word):
            return float(word)
        if _DATETIME.fullmatch(word):
            try:
                return datetime.datetime.strptime(word, "%Y-%m-%dT%H:%M:%SZ").replace(
                    tzinfo=datetime.UTC
                )
            except ValueError:
                raise self.error(f"invalid date {word!r}") from None
        if word[0] == "-":
            raise self.error(f"expected a number, got {word!r}")
        return word  # an address (127.0.0.1:4222), or words that start with a digit

    def int64(self, number: int, word: str) -> int:
        if not -_INT64 <= number < _INT64:
            raise self.error(f"integer {word!r} is out of range")
        return number

    # -- includes and variables

    def include(self, table: Table) -> None:
        line = Position(self.file, self.line)
        self.skip(newlines=False)
        char = self.peek()
        if char in ("'", '"'):
            self.advance()
            end = self.text.find(char, self.at)
            if end < 0:
                raise self.error("unterminated include path")
            name = self.take(end, skip=1)
        else:
            start = self.at
            while self.at < len(self.text) and self.text[self.at] not in " \t\r\n;}":
                self.at += 1
            name = self.text[start : self.at]
        if not name:
            raise ConfError(line, "include needs a file name")
        path = posixpath.normpath(posixpath.join(posixpath.dirname(self.file), name))
        if path in self.files:
            raise ConfError(line, f"include cycle: {' -> '.join((*self.files, path))}")
        if self.depth >= MAX_DEPTH:
            raise ConfError(line, f"includes nested deeper than {MAX_DEPTH}")
        if self.context.read is None:
            raise ConfError(line, f"cannot include {name!r} here")
        try:
            text = self.context.read(path)
        except (OSError, ValueError) as exc:
            raise ConfError(line, f"cannot read include {name!r}: {exc}") from None
        self.context.budget.spend(len(text), line)
        included = _Parser(text, path, self.context, (*self.files, path), self.depth + 1).document()
        table.update(included)
        table.positions.update(included.positions)
        table.variables.update(included.variables)

    def variable(self, name: str) -> Any:
        if not name:
            raise self.error("'$' without a variable name")
        for scope in reversed(self.scopes):
            if name in scope:
                scope.variables.add(name)
                return scope[name]
        context = self.context
        if name not in context.env:
            raise self.error(f"variable '{name}' is not defined earlier nor in the environment")
        if name in context.expanding:
            raise self.error(f"environment variable '{name}' refers to itself")
        if self.depth >= MAX_DEPTH:
            raise self.error(f"variables nested deeper than {MAX_DEPTH}")
        text = f"value={context.env[name]}"
        context.budget.spend(len(text), Position(self.file, self.line))
        context.expanding.add(name)
        try:
            parsed = _Parser(text, f"${name}", context, self.files, self.depth + 1).document()
        finally:
            context.expanding.discard(name)
        if "value" not in parsed:
            raise self.error(f"environment variable '{name}' does not hold a value")
        return parsed["value"]
