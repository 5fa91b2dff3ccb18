"""Redis's glob language (``stringmatchlen``), byte for byte, without its exponential worst case.

PSUBSCRIBE patterns, ``PUBSUB CHANNELS <pattern>`` and ``KEYS`` all speak this language, quirks
included, so clients see the same matches here as on redis-server:

* ``*`` matches any run of bytes, ``?`` exactly one byte, ``\\x`` the byte x; a lone trailing
  backslash matches a backslash.
* ``[...]`` is one byte from a set, ``[^...]`` one byte outside it. ``a-z`` is a range of raw
  bytes compared as C ``char`` (signed on the platforms Redis ships on, so ``[a-\\xff]`` is
  ``\\xff`` plus ``\\x00``-``a``), and a reversed range is swapped. ``\\x`` inside a set is the
  byte x, compared exactly even when matching without case. ``]`` right after ``[`` closes an
  empty set (``[]a]`` never matches), ``[a-]`` is the range ``]``-``a``, an unterminated ``[a``
  reads as ``[a]``, ``[`` at the end of a pattern matches nothing and ``[^`` there matches any byte.
* Without case, ASCII letters fold (C ``tolower``); a range folds its ends after swapping them.
* The empty string matches only the empty pattern (even ``*`` needs one byte).
* A pattern whose matching has to recurse through more than 1000 ``*`` (Redis 7.4's cap
  against abusive patterns, CVE-2024-31228) matches nothing; a final ``*`` does not count.

Redis matches by backtracking, polynomial since CVE-2022-36021 and still slow on hostile patterns.
Here a pattern compiles once into segments: the fixed-width runs of byte sets between ``*``. The
first segment must match at the start, the last at the end, and the ones in between are placed
leftmost, each after the previous: if any placement matches, the leftmost one does, so no
backtracking is ever needed. Runs of ``*`` are one star and a string shorter than the pattern's
fixed bytes is turned away before any scan. Within a segment, the ``?`` at its ends are only
offsets (``*`` followed by 200 ``?`` and ``b`` is a scan for a ``b`` from the 201st byte on). What
is left is found with ``bytes.find`` when it is plain bytes, otherwise by a fixed-width regular
expression that scans for its longest run of plain bytes and checks the rest around each hit
(a run of ``?`` in one step, a run of one repeated set in one tight loop). A match therefore
costs one C scan per segment, plus a check at each place a scan stops: at most the string's
length times the pattern's, all in C, and for most patterns one pass over the string. No
pattern is refused for its shape: crafted ones whose key occurs everywhere and whose checks fail
late still cost that product, as they cost redis-server more.
"""

from __future__ import annotations

import re
from itertools import compress
from typing import Final

__all__ = [
    "MAX_PATTERN",
    "MAX_STAR_NESTING",
    "GlobPattern",
    "glob_match",
    "is_literal",
    "literal_prefix",
    "positions",
]

MAX_PATTERN: Final = 1024
"""The longest pattern pubmesh subscribes to or accepts from a peer, in bytes: matching costs pattern
length times channel length."""
MAX_STAR_NESTING: Final = 1000
"""More ``*`` than this before the last byte of a pattern and it matches nothing (Redis 7.4)."""

_STAR: Final = 0x2A
_QUESTION: Final = 0x3F
_OPEN: Final = 0x5B
_CLOSE: Final = 0x5D
_CARET: Final = 0x5E
_DASH: Final = 0x2D
_BACKSLASH: Final = 0x5C

_ANY: Final = bytes(range(256))
_FLIP: Final = bytes([1, 0]) + bytes(254)
"""Turns a membership table (0 or 1 per byte) into its complement's."""

# How a compiled pattern matches, cheapest first.
_NEVER: Final = 0  # some byte set is empty: nothing can match
_EXACT: Final = 1  # no wildcard at all: equality
_PREFIX: Final = 2  # plain bytes then one final star: startswith
_SUFFIX: Final = 3  # one leading star then plain bytes: endswith
_CONTAINS: Final = 4  # plain bytes between two stars: a substring test
_GENERAL: Final = 5


def _signed(byte: int) -> int:
    """A byte as C reads a ``char`` on x86 and most ARM Linux ABIs Redis is built for."""
    return byte - 256 if byte >= 128 else byte


def _lower(c: int) -> int:
    """C ``tolower`` in the C locale (Redis never sets LC_CTYPE): ASCII letters only."""
    return c + 32 if 0x41 <= c <= 0x5A else c


def _folded(byte: int, nocase: bool) -> list[int]:
    """The bytes equal to ``byte`` under the comparison in use."""
    if nocase and _lower(byte) != byte:
        return [byte, _lower(byte)]
    if nocase and 0x61 <= byte <= 0x7A:
        return [byte - 32, byte]
    return [byte]


def _parse_set(pattern: bytes, i: int, nocase: bool) -> tuple[bytes, int]:
    """Read a set starting just after its ``[``; return its bytes and the index after it.

    Mirrors Redis's loop step by step, which is where the quirks come from: an escape needs one
    more byte, ``]`` closes, the end of the pattern closes too (with the last byte read as a
    member), and ``x-y`` needs three bytes left, so ``[a-]`` takes ``]`` as the range end.
    """
    n = len(pattern)
    negate = i < n and pattern[i] == _CARET
    if negate:
        i += 1
    members = bytearray(256)
    while True:
        if i < n and pattern[i] == _BACKSLASH and n - i >= 2:
            i += 1
            members[pattern[i]] = 1
        elif i < n and pattern[i] == _CLOSE:
            break
        elif i >= n:
            i -= 1
            break
        elif n - i >= 3 and pattern[i + 1] == _DASH:
            start = _signed(pattern[i])
            end = _signed(pattern[i + 2])
            if start > end:
                start, end = end, start
            if nocase:
                start, end = _lower(start), _lower(end)
            _add_range(members, start, end, nocase)
            i += 2
        else:
            for byte in _folded(pattern[i], nocase):
                members[byte] = 1
        i += 1
    if negate:
        members = members.translate(_FLIP)
    return bytes(compress(_ANY, members)), i + 1


def _add_range(members: bytearray, start: int, end: int, nocase: bool) -> None:
    """Mark the bytes whose value as a signed ``char`` (folded by C ``tolower`` when ``nocase``)
    lies within ``start``..``end``."""
    before = members[0x41:0x5B]
    if end >= 0 and start <= 127:  # the bytes 0..127 read the same signed
        low, high = max(start, 0), end
        members[low : high + 1] = b"\x01" * (high - low + 1)
    if start < 0:  # 128..255 read as -128..-1
        low, high = start + 256, min(end, -1) + 256
        members[low : high + 1] = b"\x01" * (high - low + 1)
    if nocase:  # upper-case letters compare as their lower case
        for upper in range(0x41, 0x5B):
            members[upper] = 1 if before[upper - 0x41] or start <= upper + 32 <= end else 0


def _tokenize(pattern: bytes, nocase: bool) -> list[bytes | None]:
    """The pattern as a list of tokens: None for a run of ``*``, else the bytes one position accepts."""
    tokens: list[bytes | None] = []
    n = len(pattern)
    i = 0
    while i < n:
        c = pattern[i]
        if c == _STAR:
            while i + 1 < n and pattern[i + 1] == _STAR:
                i += 1
            tokens.append(None)
            i += 1
        elif c == _QUESTION:
            tokens.append(_ANY)
            i += 1
        elif c == _OPEN:
            members, i = _parse_set(pattern, i + 1, nocase)
            tokens.append(members)
        else:
            if c == _BACKSLASH and i + 1 < n:
                i += 1
            tokens.append(bytes(_folded(pattern[i], nocase)))
            i += 1
    return tokens


def _byte_class(members: bytes) -> bytes:
    """A regular-expression class for exactly these bytes, as ranges of ``\\xNN`` escapes."""
    if not members:
        return b"(?!)"
    if len(members) == 256:
        return b"[\\x00-\\xff]"
    parts: list[bytes] = []
    k = 0
    while k < len(members):
        first = members[k]
        while k + 1 < len(members) and members[k + 1] == members[k] + 1:
            k += 1
        last = members[k]
        parts.append(b"\\x%02x" % first if first == last else b"\\x%02x-\\x%02x" % (first, last))
        k += 1
    return b"[" + b"".join(parts) + b"]"


def _expression(tokens: list[bytes]) -> bytes:
    """A regular expression (``re.DOTALL``) matching exactly these byte sets in a row.

    Plain bytes stay single literals, so a leading run of them is what the engine scans for; a run
    of one repeated set becomes one counted repeat, checked in a tight loop, and a run of any-byte
    positions ``.{k}``, which the engine skips in one step.
    """
    parts: list[bytes] = []
    classes: dict[bytes, bytes] = {}  # hostile patterns repeat a few sets many times
    i = 0
    while i < len(tokens):
        token = tokens[i]
        j = i + 1
        while j < len(tokens) and tokens[j] == token:
            j += 1
        if len(token) == 1:
            parts.append((b"\\x%02x" % token[0]) * (j - i))
        else:
            atom = classes.get(token, b"")
            if not atom:
                atom = classes[token] = b"." if len(token) == 256 else _byte_class(token)
            parts.append(atom if j - i == 1 else atom + b"{%d}" % (j - i))
        i = j
    return b"".join(parts)


def _longest_literal(tokens: list[bytes]) -> tuple[int, int]:
    """Where the longest run of plain bytes begins and how long it is (the first of equals)."""
    best_start = best_len = 0
    i = 0
    while i < len(tokens):
        j = i
        while j < len(tokens) and len(tokens[j]) == 1:
            j += 1
        if j - i > best_len:
            best_start, best_len = i, j - i
        i = max(j, i + 1)
    return best_start, best_len


class _Segment:
    """A fixed-width run of byte sets between two ``*``, compiled so that finding it stays cheap.

    Any-byte positions (``?``) at either end only shift where the rest may lie: they are counted
    (``lead``, ``trail``), never scanned. The rest, the core, is found with ``bytes.find`` when it is
    plain bytes. Otherwise a regular expression finds it, one that starts with the core's longest
    run of plain bytes (the key), so the engine scans for that run and checks the other positions
    only where it occurs: those after the key first, then those before it by a look-behind.
    Inside, a run of any bytes is skipped in one step and a run of one repeated set checked in
    one loop, so checking a candidate place costs at most one step per byte of the core, in C.

    Attributes:
        width: bytes the segment spans.
        literal: the whole segment when it is plain bytes (no ``?`` or set of several bytes).
    """

    __slots__ = ("core", "key_offset", "lead", "literal", "regex", "trail", "width")

    def __init__(self, tokens: list[bytes]) -> None:
        width = len(tokens)
        lead = 0
        while lead < width and len(tokens[lead]) == 256:
            lead += 1
        trail = 0
        while trail < width - lead and len(tokens[width - 1 - trail]) == 256:
            trail += 1
        core = tokens[lead : width - trail]
        self.width = width
        self.lead = lead
        self.trail = trail
        self.core = b""
        self.key_offset = 0
        self.regex: re.Pattern[bytes] | None = None
        self.literal: bytes | None = None
        if all(len(t) == 1 for t in core):
            self.core = b"".join(core)
            if not lead and not trail:
                self.literal = self.core
            return
        start, length = _longest_literal(core)
        self.key_offset = start
        end = start + length
        expression = _expression(core[start:end]) + _expression(core[end:])
        if start:  # checked last, from the end of the core back past the key and what follows it
            behind = _expression(core[:start] + [_ANY] * (len(core) - start))
            expression += b"(?<=" + behind + b")"
        self.regex = re.compile(expression, re.DOTALL)

    def at(self, string: bytes, pos: int) -> bool:
        """Whether the segment matches at ``pos`` (``string`` holds ``width`` bytes from there)."""
        regex = self.regex
        if regex is None:
            return string.startswith(self.core, pos + self.lead)
        return regex.match(string, pos + self.lead + self.key_offset) is not None

    def find(self, string: bytes, start: int, end: int) -> int:
        """Where the leftmost occurrence within ``string[start:end]`` begins, or -1."""
        low = start + self.lead
        high = end - self.trail
        regex = self.regex
        if regex is None:
            if low + len(self.core) > high:
                return -1
            found = string.find(self.core, low, high)
            return found if found < 0 else found - self.lead
        matched = regex.search(string, low + self.key_offset, high)
        return -1 if matched is None else matched.start() - self.key_offset - self.lead


def _literal_run(tokens: list[bytes | None]) -> bytes:
    """The bytes forced by the leading tokens that accept exactly one byte each."""
    out = bytearray()
    for token in tokens:
        if token is None or len(token) != 1:
            break
        out += token
    return bytes(out)


class GlobPattern:
    """A pattern compiled once, for matching many strings.

    Attributes:
        pattern: the pattern as given.
        nocase: whether ASCII letters match without case.
        literal_prefix: bytes every matching string starts with (all of it when ``is_literal``).
        literal_suffix: bytes every matching string ends with.
        is_literal: the pattern matches exactly one string, ``literal_prefix``.
        matches_nothing: no string matches (an empty set such as ``[]``, or too many ``*``).
    """

    __slots__ = (
        "_head",
        "_kind",
        "_middle",
        "_min_len",
        "_needle",
        "_stars",
        "_tail",
        "is_literal",
        "literal_prefix",
        "literal_suffix",
        "matches_nothing",
        "nocase",
        "pattern",
    )

    def __init__(self, pattern: bytes, *, nocase: bool = False) -> None:
        self.pattern = pattern
        self.nocase = nocase
        tokens = _tokenize(pattern, nocase)
        self.literal_prefix = _literal_run(tokens)
        self.literal_suffix = _literal_run(tokens[::-1])[::-1]
        runs: list[list[bytes]] = [[]]
        for token in tokens:
            if token is None:
                runs.append([])
            else:
                runs[-1].append(token)
        stars = len(runs) - 1
        self._stars = stars
        self._min_len = sum(len(run) for run in runs)
        self._needle = b""
        nested = stars - 1 if stars and not runs[-1] else stars
        never = nested > MAX_STAR_NESTING or any(token is not None and not token for token in tokens)
        self.matches_nothing = never
        if never:
            runs = [[]]  # nothing to search for: skip compiling what can never match
        compiled: dict[tuple[bytes, ...], _Segment] = {}  # hostile patterns repeat one run
        segments: list[_Segment] = []
        for run in runs:
            key = tuple(run)
            segment = compiled.get(key)
            if segment is None:
                segment = compiled[key] = _Segment(run)
            segments.append(segment)
        self._head = segments[0]
        self._tail = segments[-1] if len(segments) > 1 else _Segment([])
        self._middle = segments[1:-1]
        self.is_literal = stars == 0 and len(self.literal_prefix) == len(tokens)
        if never:
            self._kind = _NEVER
        elif self.is_literal:
            self._kind = _EXACT
        elif stars == 1 and self._tail.width == 0 and self._head.literal is not None:
            self._kind = _PREFIX
        elif stars == 1 and self._head.width == 0 and self._tail.literal is not None:
            self._kind = _SUFFIX
        elif stars == 2 and self._head.width == self._tail.width == 0 and self._middle[0].literal:
            self._kind = _CONTAINS
            self._needle = self._middle[0].literal
        else:
            self._kind = _GENERAL

    def __repr__(self) -> str:
        return f"GlobPattern({self.pattern!r}, nocase={self.nocase})"

    def match(self, string: bytes) -> bool:
        if not string:
            return not self.pattern
        kind = self._kind
        if kind == _EXACT:
            return string == self.literal_prefix
        if kind == _PREFIX:
            return string.startswith(self.literal_prefix)
        if kind == _SUFFIX:
            return string.endswith(self.literal_suffix)
        if kind == _CONTAINS:
            return self._needle in string
        if kind == _NEVER or len(string) < self._min_len:
            return False
        if self._stars == 0:
            return len(string) == self._min_len and self._head.at(string, 0)
        return self._match_segments(string)

    def _match_segments(self, string: bytes) -> bool:
        end = len(string) - self._tail.width
        if not self._head.at(string, 0) or not self._tail.at(string, end):
            return False
        pos = self._head.width
        for segment in self._middle:
            found = segment.find(string, pos, end)
            if found < 0:
                return False
            pos = found + segment.width
        return True


def glob_match(pattern: bytes, string: bytes, *, nocase: bool = False) -> bool:
    """Whether ``string`` matches ``pattern`` as Redis's ``stringmatchlen`` decides it.

    Compiles the pattern on every call: keep a ``GlobPattern`` to match one pattern repeatedly.
    """
    return GlobPattern(pattern, nocase=nocase).match(string)


def literal_prefix(pattern: bytes) -> bytes:
    """The bytes every channel matching ``pattern`` (case-sensitively) starts with."""
    return GlobPattern(pattern).literal_prefix


def is_literal(pattern: bytes) -> bool:
    """Whether ``pattern`` matches exactly one channel (``literal_prefix(pattern)``).

    True for patterns with no ``*``, ``?``, ``[`` or ``\\``, and for those whose escapes and
    one-byte sets still leave a single possible channel, such as ``news\\*`` or ``[a]b``.
    """
    return GlobPattern(pattern).is_literal


def positions(pattern: bytes) -> list[bytes | None]:
    """What each position of ``pattern`` accepts, matching with case: None for a run of ``*``, else
    the bytes that one channel byte may be (none for an empty set). Automata over the channels a
    pattern matches are built from this, so they read the pattern exactly as matching does."""
    return _tokenize(pattern, False)
