"""The compiled glob's segments against the port of ``stringmatchlen`` (``test_glob``): patterns built
from the shapes their compilation treats apart, with strings built to match them and near misses.

Between two ``*`` a pattern is a fixed-width segment: its ``?`` at either end only shift it, a run of
one repeated set is checked as one, and its longest run of plain bytes is what is scanned for, with
the positions before it checked looking back. Drawn patterns mix exactly those shapes, and every
string they are tried on is a match (built from the pattern) or one edit away from one, so matching
and non-matching answers both come up.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from routing import GlobPattern, PatternIndex
from tests.routing.test_glob import redis_stringmatch

LETTERS = b"abcB"
SETS: dict[bytes, bytes] = {
    b"[ab]": b"ab",
    b"[^a]": b"bcB]",
    b"[b-c]": b"bc",
    b"[c-a]": b"abc",  # reversed: swapped
    b"[\\]a]": b"]a",
    b"[a]": b"a",  # one byte: plain
    b"[^]": LETTERS,  # negated empty: any byte
    b"[A-b]": b"aB]",  # raw byte range (and ']' inside it)
}
"""Sets drawn into patterns, with the bytes (of those strings are made of) each accepts."""


@st.composite
def pattern_and_match(draw: st.DrawFn, max_atoms: int = 8, max_repeat: int = 6) -> tuple[bytes, bytes]:
    """A pattern of repeated atoms (plain bytes, ``?``, ``*``, sets, escapes), and a string it
    matches, built atom by atom."""
    pattern = bytearray()
    string = bytearray()
    for _ in range(draw(st.integers(0, max_atoms))):
        kind = draw(st.sampled_from(["byte", "any", "star", "set", "escape"]))
        times = draw(st.integers(1, max_repeat))
        if kind == "byte":
            byte = draw(st.sampled_from(LETTERS))
            pattern += bytes([byte]) * times
            string += bytes([byte]) * times
        elif kind == "any":
            pattern += b"?" * times
            string += bytes(draw(st.lists(st.sampled_from(LETTERS), min_size=times, max_size=times)))
        elif kind == "star":
            pattern += b"*" * times
            string += bytes(draw(st.lists(st.sampled_from(LETTERS), max_size=4)))
        elif kind == "set":
            text, members = draw(st.sampled_from(sorted(SETS.items())))
            pattern += text * times
            string += bytes(draw(st.lists(st.sampled_from(members), min_size=times, max_size=times)))
        else:
            byte = draw(st.sampled_from(b"*?[a"))
            pattern += b"\\" + bytes([byte])
            string.append(byte)
    return bytes(pattern), bytes(string)


def near_misses(string: bytes) -> list[bytes]:
    """The string with one byte dropped, changed or added, at a few places."""
    out = [string + b"a", b"c" + string, string[1:], string[:-1]]
    for i in range(0, len(string), max(1, len(string) // 4)):
        out.append(string[:i] + string[i + 1 :])
        out.append(string[:i] + (b"c" if string[i : i + 1] != b"c" else b"a") + string[i + 1 :])
        out.append(string[:i] + b"B" + string[i:])
    return out


@pytest.mark.slow
@given(drawn=pattern_and_match(), nocase=st.booleans())
@settings(max_examples=2000)
def test_segments_agree_with_the_port(drawn: tuple[bytes, bytes], nocase: bool) -> None:
    pattern, string = drawn
    compiled = GlobPattern(pattern, nocase=nocase)
    # built to match, except that only '' matches '' and ranges fold their ends without case
    assert compiled.match(string) or not string or nocase
    for other in [string, *near_misses(string)]:
        assert compiled.match(other) is redis_stringmatch(pattern, other, nocase), other


@pytest.mark.slow
@given(drawn=pattern_and_match(max_atoms=12, max_repeat=30))
@settings(max_examples=300)
def test_long_runs_agree_with_the_port(drawn: tuple[bytes, bytes]) -> None:
    """Runs long enough to be counted repeats and skips rather than single steps."""
    pattern, string = drawn
    compiled = GlobPattern(pattern)
    assert compiled.match(string) or not string
    for other in near_misses(string):
        assert compiled.match(other) is redis_stringmatch(pattern, other), other


@pytest.mark.slow
@given(
    before=st.sampled_from([b"", b"?", b"??", b"[ab]", b"[ab]?", b"?[^a]", b"[ab][ab]"]),
    key=st.sampled_from([b"a", b"ab", b"bab"]),
    after=st.sampled_from([b"", b"?", b"[^a]", b"?[ab]", b"[ab][ab]?"]),
    string=st.lists(st.sampled_from(b"abc"), max_size=24).map(bytes),
)
@settings(max_examples=1500)
def test_keyed_middle_segments(before: bytes, key: bytes, after: bytes, string: bytes) -> None:
    """A segment found by its plain bytes in the middle, whatever surrounds them, at every place
    of the string (any byte between two stars, as the leftmost search tries them)."""
    for pattern in (b"*" + before + key + after + b"*", b"?*" + before + key + after + b"*?"):
        assert GlobPattern(pattern).match(string) is redis_stringmatch(pattern, string), pattern


# --- hostile patterns ----------------------------------------------------------------------------

HOSTILE_CHANNEL = b"a" * 10_238 + b"zz"
"""10 KB with no ``b``: a backtracking matcher tries all 201 positions after each of its bytes."""


def hostile(i: int) -> bytes:
    """``*``, 200 ``?``, then ``b*`` and two sets: distinct for each ``i``, none matching
    ``HOSTILE_CHANNEL``."""
    return b"*" + b"?" * 200 + b"b*[a-z%d][a-z%d]" % (i, i)


@pytest.mark.timeout(30)
def test_hostile_patterns_against_a_long_channel() -> None:
    """The stall workload: 1,000 such patterns and a 10 KB channel, answered exactly (and quickly:
    the ``b`` is scanned for once, the 200 ``?`` only shift where it may be)."""
    index: PatternIndex[int] = PatternIndex()
    for i in range(1000):
        index.add(hostile(i), i)
    assert index.match(HOSTILE_CHANNEL) == []
    for _ in range(20):  # not remembered (too long a channel): matched afresh each time
        assert index.match(HOSTILE_CHANNEL) == []
    matching = b"a" * 200 + b"b" + HOSTILE_CHANNEL
    assert [p for p, _ in index.match(matching)] == [hostile(i) for i in range(1000)]
    assert index.match(b"b" * 200 + HOSTILE_CHANNEL[200:]) == []  # each b is too early


@pytest.mark.timeout(30)
def test_hostile_shapes_stay_linear() -> None:
    """Shapes that cost a backtracking matcher channel length times pattern length each."""
    channel = b"a" * 100_000
    cases = [
        (b"*" + b"[^b]" * 250 + b"b*", False),  # one repeated set: counted, not stepped
        (b"*a" + b"?" * 500 + b"[^a]*", False),  # a key everywhere, its check fails at once
        (b"*" + b"?" * 500 + b"a" + b"?" * 500 + b"*", True),
        (b"*[ab]" + b"?" * 900 + b"b*", False),
        (b"*" + b"a" * 500 + b"[^a]*", False),
        (b"?" * 1000, False),
    ]
    for pattern, expected in cases:
        compiled = GlobPattern(pattern)
        for _ in range(20):
            assert compiled.match(channel) is expected, pattern
