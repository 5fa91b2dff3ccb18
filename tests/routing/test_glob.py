"""The glob matcher against Redis: a line-by-line port of ``stringmatchlen`` and a live redis-server.

The port below is the executable specification (recursive, backtracking, slow, small inputs only);
the live server settles what the C code does on the platform, e.g. that ranges compare signed
``char``. The server tests are skipped where redis-server is not installed.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.local import free_port
from routing import GlobPattern, glob_match, is_literal, literal_prefix

# --- the reference: Redis 7.4's stringmatchlen, ported statement by statement ---------------------


def redis_stringmatch(pattern: bytes, string: bytes, nocase: bool = False) -> bool:
    skip_longer = [False]

    def at(i: int) -> int:  # C reads the NUL terminator one past the end
        return pattern[i] if i < len(pattern) else 0

    def signed(c: int) -> int:
        return c - 256 if c >= 128 else c

    def lower(c: int) -> int:
        return c + 32 if 65 <= c <= 90 else c

    def impl(p: int, s: int, nesting: int) -> bool:
        if nesting > 1000:
            return False
        plen, slen = len(pattern) - p, len(string) - s
        while plen and slen:
            c = pattern[p]
            if c == ord("*"):
                while plen and at(p + 1) == ord("*"):
                    p, plen = p + 1, plen - 1
                if plen == 1:
                    return True
                while slen:
                    if impl(p + 1, s, nesting + 1):
                        return True
                    if skip_longer[0]:
                        return False
                    s, slen = s + 1, slen - 1
                skip_longer[0] = True
                return False
            if c == ord("?"):
                s, slen = s + 1, slen - 1
            elif c == ord("["):
                p, plen = p + 1, plen - 1
                negate = at(p) == ord("^")
                if negate:
                    p, plen = p + 1, plen - 1
                found = False
                while True:
                    if at(p) == ord("\\") and plen >= 2:
                        p, plen = p + 1, plen - 1
                        found = found or at(p) == string[s]
                    elif at(p) == ord("]"):
                        break
                    elif plen == 0:
                        p, plen = p - 1, plen + 1
                        break
                    elif plen >= 3 and at(p + 1) == ord("-"):
                        start, end, ch = signed(at(p)), signed(at(p + 2)), signed(string[s])
                        if start > end:
                            start, end = end, start
                        if nocase:
                            start, end, ch = lower(start), lower(end), lower(ch)
                        p, plen = p + 2, plen - 2
                        found = found or start <= ch <= end
                    elif nocase:
                        found = found or lower(at(p)) == lower(string[s])
                    else:
                        found = found or at(p) == string[s]
                    p, plen = p + 1, plen - 1
                if negate:
                    found = not found
                if not found:
                    return False
                s, slen = s + 1, slen - 1
            else:
                if c == ord("\\") and plen >= 2:
                    p, plen = p + 1, plen - 1
                if (lower(at(p)) != lower(string[s])) if nocase else (at(p) != string[s]):
                    return False
                s, slen = s + 1, slen - 1
            p, plen = p + 1, plen - 1
            if slen == 0:
                while at(p) == ord("*"):
                    p, plen = p + 1, plen - 1
                break
        return plen == 0 and slen == 0

    return impl(0, 0, 0)


# --- quirks, each checked against the port, the live server and the compiled matcher -------------

QUIRKS: list[tuple[bytes, bytes, bool]] = [
    (b"", b"", True),
    (b"*", b"", False),  # the empty string matches only the empty pattern
    (b"*", b"x", True),
    (b"**", b"x", True),
    (b"a*", b"a", True),
    (b"a*b", b"ab", True),
    (b"a*b*", b"abxxb", True),
    (b"h?llo", b"hello", True),
    (b"h?llo", b"hllo", False),
    (b"h[ae]llo", b"hallo", True),
    (b"h[^e]llo", b"hello", False),
    (b"h[a-b]llo", b"hbllo", True),
    (b"[b-a]", b"a", True),  # reversed ranges are swapped
    (b"[]a]", b"a", False),  # "[]" is an empty set
    (b"[]a]", b"]", False),
    (b"[]a]", b"a]", False),
    (b"[^]", b"x", True),
    (b"[a-]", b"]", True),  # the range "]".."a"
    (b"[a-]", b"^", True),
    (b"[a-]", b"a", True),
    (b"[a-]", b"-", False),
    (b"[-]", b"-", True),
    (b"[a-c-z]", b"-", True),
    (b"[a-c-z]", b"z", True),
    (b"[a-c-z]", b"d", False),
    (b"[a", b"a", True),  # unterminated: as if closed
    (b"[a", b"[a", False),
    (b"[", b"[", False),  # "[" at the end matches nothing
    (b"[^", b"x", True),  # ... and "[^" there matches anything
    (b"[\\", b"\\", True),
    (b"[A-b]", b"]", True),  # raw byte range
    (b"[A-b]", b"`", True),
    (b"[A-b]", b"c", False),
    (b"[\\]]", b"]", True),
    (b"[\\-a]", b"-", True),
    (b"[a\\-c]", b"b", False),
    (b"\\*", b"*", True),
    (b"\\*", b"x", False),
    (b"\\", b"\\", True),  # a lone trailing backslash
    (b"a\\", b"a\\", True),
    (b"\\a", b"a", True),
    (b"[a-\xff]", b"\xff", True),  # ranges compare signed char
    (b"[a-\xff]", b"\x00", True),
    (b"[a-\xff]", b"b", False),
    (b"[a-\xff]", b"\x80", False),
    (b"[\x80-\xff]", b"\x90", True),
    (b"a\x00*", b"a\x00b", True),
    (b"*a*a*a*b", b"aaaaaaaaaaaaab", True),
    (b"*a*a*a*b", b"aaaaaaaaaaaaaa", False),
    (b"*?*?", b"a", False),
    (b"*?*?", b"ab", True),
    (b"news.*", b"news.", True),
    (b"news.*", b"news", False),
]


@pytest.mark.parametrize(("pattern", "string", "expected"), QUIRKS)
def test_quirks(pattern: bytes, string: bytes, expected: bool) -> None:
    assert redis_stringmatch(pattern, string) is expected
    assert glob_match(pattern, string) is expected
    assert GlobPattern(pattern).match(string) is expected


# --- agreement with the port on random inputs ------------------------------------------------------

SMALL = b"abc*?[]^-\\"
WIDE = SMALL + b"AZ\x00\x7f\x80\xff"


def over(alphabet: bytes, max_size: int) -> st.SearchStrategy[bytes]:
    return st.lists(st.sampled_from(list(alphabet)), max_size=max_size).map(bytes)


@pytest.mark.slow
@given(
    pattern=over(WIDE, 10), strings=st.lists(over(WIDE + b"abc", 8), max_size=8), nocase=st.booleans()
)
@settings(max_examples=1500)
def test_agrees_with_the_port(pattern: bytes, strings: list[bytes], nocase: bool) -> None:
    compiled = GlobPattern(pattern, nocase=nocase)
    for string in strings:
        assert compiled.match(string) is redis_stringmatch(pattern, string, nocase), string


@pytest.mark.slow
@given(pattern=over(b"ab*?", 12), string=over(b"ab", 14))
@settings(max_examples=500)
def test_agrees_with_the_port_on_stars(pattern: bytes, string: bytes) -> None:
    """Few bytes, many stars: where leftmost placement and backtracking could part ways."""
    assert glob_match(pattern, string) is redis_stringmatch(pattern, string)


@given(pattern=over(WIDE, 10), string=over(WIDE, 10))
def test_literal_prefix_and_suffix_are_necessary(pattern: bytes, string: bytes) -> None:
    compiled = GlobPattern(pattern)
    if compiled.match(string):
        assert string.startswith(compiled.literal_prefix)
        assert string.endswith(compiled.literal_suffix)
        assert not compiled.is_literal or string == compiled.literal_prefix
    assert literal_prefix(pattern) == compiled.literal_prefix
    assert is_literal(pattern) is compiled.is_literal


def test_literal_prefix() -> None:
    assert literal_prefix(b"news.sports.*") == b"news.sports."
    assert literal_prefix(b"news.?x") == b"news."
    assert literal_prefix(b"a\\*b[c]d[ef]") == b"a*bcd"
    assert literal_prefix(b"*x") == b""
    assert GlobPattern(b"*.errors").literal_suffix == b".errors"
    assert is_literal(b"news.sports")
    assert is_literal(b"news\\*")
    assert is_literal(b"")
    assert not is_literal(b"news*")
    assert not is_literal(b"[]")
    assert not GlobPattern(b"abc", nocase=True).is_literal
    assert GlobPattern(b"x[]").matches_nothing
    assert GlobPattern(b"*?" * 1001).matches_nothing
    assert not GlobPattern(b"*?" * 1000).matches_nothing


# --- hostile patterns -----------------------------------------------------------------------------


@pytest.mark.timeout(20)
def test_many_stars_against_a_long_string_finish() -> None:
    """Exponential for the backtracking matchers before CVE-2022-36021; linear scans here."""
    long = b"a" * 100_000
    assert not glob_match(b"*a" * 30 + b"b", long)
    assert glob_match(b"*a" * 30 + b"*", long)
    assert glob_match(b"*?" * 1000, long)
    assert not glob_match(b"*?" * 50_000, long)  # past the nesting cap
    assert not glob_match(b"*[ab]" * 500 + b"c", long)


@pytest.mark.parametrize(
    ("pattern", "string", "expected"),
    [
        (b"*?" * 1000, b"a" * 1000, True),
        (b"*?" * 1001, b"a" * 1001, False),  # the 1001st nested star gives up
        (b"*a" * 1000 + b"*", b"a" * 1000, True),  # a final star does not nest
        (b"*a" * 1001 + b"*", b"a" * 1001, False),
        (b"a*" * 1001, b"a" * 1001, True),  # the string ends before the last star is reached
    ],
    ids=["1000", "1001", "1000+final", "1001+final", "trailing"],
)
def test_nesting_cap(pattern: bytes, string: bytes, expected: bool) -> None:
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(10_000)
    try:
        assert redis_stringmatch(pattern, string) is expected
    finally:
        sys.setrecursionlimit(limit)
    assert glob_match(pattern, string) is expected


# --- the live server ------------------------------------------------------------------------------


class Resp:
    """Just enough of a RESP2 client: pipelined commands, replies read one by one."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.buf = b""

    def send(self, *args: bytes) -> None:
        frame = b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)
        self.sock.sendall(frame)

    def _line(self) -> bytes:
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            assert chunk, "redis-server hung up"
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\r\n")
        return line

    def _exactly(self, n: int) -> bytes:
        while len(self.buf) < n + 2:
            chunk = self.sock.recv(65536)
            assert chunk, "redis-server hung up"
            self.buf += chunk
        data, self.buf = self.buf[:n], self.buf[n + 2 :]
        return data

    def read(self) -> object:
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"-":
            raise AssertionError(rest.decode())
        if kind == b"+":
            return rest
        if kind == b":":
            return int(rest)
        if kind == b"$":
            return None if int(rest) < 0 else self._exactly(int(rest))
        assert kind == b"*", line
        return [self.read() for _ in range(int(rest))]

    def channels(self, pattern: bytes) -> set[bytes]:
        self.send(b"PUBSUB", b"CHANNELS", pattern)
        reply = self.read()
        assert isinstance(reply, list)
        return {c for c in reply if isinstance(c, bytes)}


class Server:
    """A redis-server with one connection holding channel subscriptions and one asking about them."""

    def __init__(self, port: int) -> None:
        self.subscriber = Resp(port)
        self.query = Resp(port)
        self.subscribed: set[bytes] = set()

    def _toggle(self, command: bytes, channels: list[bytes]) -> None:
        if channels:
            self.subscriber.send(command, *channels)
            for _ in channels:
                self.subscriber.read()

    def subscribe(self, channels: set[bytes]) -> list[bytes]:
        fresh = sorted(channels - self.subscribed)
        self._toggle(b"SUBSCRIBE", fresh)
        self.subscribed.update(fresh)
        return fresh

    def unsubscribe(self, channels: list[bytes]) -> None:
        self._toggle(b"UNSUBSCRIBE", channels)
        self.subscribed.difference_update(channels)

    def close(self) -> None:
        self.subscriber.sock.close()
        self.query.sock.close()


@pytest.fixture(scope="module")
def redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    exe = shutil.which("redis-server")
    if exe is None:
        pytest.skip("redis-server is not installed")
    port = free_port()
    workdir: Path = tmp_path_factory.mktemp("redis")
    args = [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    proc = subprocess.Popen(
        [*args, "--dir", str(workdir)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None, "redis-server exited"
                assert time.monotonic() < deadline, "redis-server did not start"
                time.sleep(0.05)
        server = Server(port)
        yield server
        server.close()
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.slow
def test_quirks_on_the_server(redis: Server) -> None:
    redis.subscribe({string for _, string, _ in QUIRKS})
    for pattern, string, expected in QUIRKS:
        assert (string in redis.query.channels(pattern)) is expected, (pattern, string)


UNIVERSE = {b""} | {bytes([a]) for a in SMALL} | {bytes([a, b]) for a in SMALL for b in SMALL}


def assert_server_agrees(redis: Server, patterns: list[bytes], strings: list[bytes]) -> None:
    """Every subscribed channel is checked against each pattern in one round trip."""
    extra = redis.subscribe(set(strings))
    try:
        for pattern in patterns:
            compiled = GlobPattern(pattern)
            expected = {c for c in redis.subscribed if compiled.match(c)}
            assert redis.query.channels(pattern) == expected, pattern
    finally:
        redis.unsubscribe(extra)


@pytest.mark.slow
@given(patterns=st.lists(over(SMALL, 8), min_size=1, max_size=5), strings=st.lists(over(SMALL, 7)))
@settings(max_examples=300)
def test_agrees_with_the_server(redis: Server, patterns: list[bytes], strings: list[bytes]) -> None:
    """Against all strings of up to two bytes, plus the drawn ones."""
    redis.subscribe(UNIVERSE)
    assert_server_agrees(redis, patterns, strings)


@pytest.mark.slow
@given(patterns=st.lists(over(WIDE, 6), min_size=1, max_size=5), strings=st.lists(over(WIDE, 5)))
@settings(max_examples=100)
def test_agrees_with_the_server_on_raw_bytes(
    redis: Server, patterns: list[bytes], strings: list[bytes]
) -> None:
    """Upper case, NUL, DEL and bytes past 0x7f, where ranges compare as signed char."""
    assert_server_agrees(redis, patterns, strings)
