"""Splitting an inline request line into arguments, as redis-server's ``sdssplitargs`` does.

Inline requests (``SET a "b c"``) are what people type into telnet or ``nc``, so their quirks are
user-visible and copied as they are: blanks before a word are any of `` \\t\\n\\r\\v\\f`` but a
bare word ends only at `` \\t\\n\\r`` (``a\\vb`` is one word); a quote may open in the middle of a word
(``a"b c"`` is ``ab c``) and its closing quote must be followed by a blank or the end of the line;
in double quotes ``\\xHH``, ``\\n``, ``\\r``, ``\\t``, ``\\b``, ``\\a`` are escapes and a backslash
before any other character stands for that character; in single quotes only ``\\'`` is an escape.

Lines without quotes, nearly all of them, are split by one regular-expression call.
"""

from __future__ import annotations

import re

from node.resp.errors import RespProtocolError

__all__ = ["UNBALANCED_QUOTES", "split_inline"]

UNBALANCED_QUOTES = "unbalanced quotes in request"

_BARE = re.compile(rb"[^ \t\n\r\v\f][^ \t\n\r]*")
_BLANKS = re.compile(rb"[ \t\n\r\v\f]*")
# A word: an optional bare start, then optionally one quoted part, which ends the word. The quoted
# contents are atomic groups so that, as in the C loop, an escape once read is never re-read as the
# closing quote. (Not possessive quantifiers: early 3.11 releases match those wrongly on groups.)
_WORD = re.compile(
    rb"""([^ \t\n\r\v\f"'][^ \t\n\r"']*)?"""
    rb"""(?:"((?>(?:\\x[0-9a-fA-F]{2}|\\.|[^"\\])*))"|'((?>(?:\\'|[^'])*))')?""",
    re.DOTALL,
)
_ESCAPE = re.compile(rb"\\(x[0-9a-fA-F]{2}|.)", re.DOTALL)
_ESCAPES = {b"n": b"\n", b"r": b"\r", b"t": b"\t", b"b": b"\b", b"a": b"\a"}
_SPACE = frozenset(b" \t\n\r\v\f")


def _unescape(match: re.Match[bytes]) -> bytes:
    code = match.group(1)
    if len(code) == 3:
        return bytes([int(code[1:], 16)])
    return _ESCAPES.get(code, code)


def split_inline(line: bytes) -> list[bytes]:
    """The arguments of an inline request line (without its line end); raise
    ``RespProtocolError(UNBALANCED_QUOTES)`` for an unterminated quote, or a closing quote followed
    by something other than a blank."""
    if b'"' not in line and b"'" not in line:
        return _BARE.findall(line)
    args: list[bytes] = []
    pos, end = 0, len(line)
    while True:
        blanks = _BLANKS.match(line, pos)
        assert blanks is not None  # (it matches the empty string)
        pos = blanks.end()
        if pos == end:
            return args
        word = _WORD.match(line, pos)
        assert word is not None
        pos = word.end()
        if pos == word.start() or (pos < end and line[pos] not in _SPACE):
            raise RespProtocolError(UNBALANCED_QUOTES)
        bare, double, single = word.groups()
        arg = bare or b""
        if double is not None:
            arg += _ESCAPE.sub(_unescape, double)
        elif single is not None:
            arg += single.replace(b"\\'", b"'")
        args.append(arg)
