"""Fuzzing the RESP request parser: random bytes and mutated requests, cut at random points.

What must hold for every input:

- the parser yields only ``Command``s (a non-empty list of ``bytes`` arguments) and then, at most
  once, raises ``RespProtocolError``; never any other exception;
- after each read is parsed, what it holds (``buffered``) stays within its limits: a partial line
  of at most ``max_inline`` bytes and a partial request of at most ``max_request``;
- the outcome (commands, then the error text or none) is the same however the bytes were cut.

Limits are small here so that random input reaches them. The default number of examples keeps the
file to a few seconds; ``FUZZ_EXAMPLES`` asks for more, and the ``fuzz`` marker selects these tests.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from node.resp import Command, RequestParser, RespProtocolError

pytestmark = [pytest.mark.slow, pytest.mark.fuzz, pytest.mark.timeout(600)]

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "1000"))
LIMITS = {"max_inline": 64, "max_bulk_len": 200, "max_request": 600}
BOUND = LIMITS["max_request"] + LIMITS["max_inline"] + 1
"""The most a parser may hold after parsing: a request that is all but complete, and a partial
length line of the next argument (with the CR of its line end)."""

TOKENS = [b"*", b"$", b"\r", b"\n", b"\r\n", b"\0", b"-", b"0", b"1", b"9", b"10", b"11", b"16385",
          b"2147483648", b"99999999999999999999", b" ", b"\t", b"\x0b", b'"', b"'", b"\\", b"\\x4",
          b"\\xff", b"PING", b"\xff"]  # fmt: skip


def multibulk(args: list[bytes]) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%b\r\n" % (len(a), a) for a in args)


requests = st.one_of(
    st.lists(st.binary(max_size=60), min_size=0, max_size=12).map(multibulk),
    st.lists(st.binary(min_size=50, max_size=200), min_size=2, max_size=5).map(multibulk),
    st.binary(max_size=100).map(lambda b: b"*" + b.replace(b"\r", b"")),
    st.lists(st.sampled_from(TOKENS), max_size=20).map(lambda t: b"".join(t) + b"\r\n"),
    st.binary(max_size=300),
)


@st.composite
def hostile(draw: st.DrawFn) -> bytes:
    """A stream of requests, some of them mutated: bytes flipped, deleted or inserted."""
    data = bytearray(b"".join(draw(st.lists(requests, min_size=1, max_size=6))))
    for _ in range(draw(st.integers(0, 4))):
        at = draw(st.integers(0, len(data)))
        kind = draw(st.sampled_from(["flip", "delete", "insert", "repeat"]))
        if kind == "flip" and at < len(data):
            data[at] = draw(st.integers(0, 255))
        elif kind == "delete":
            del data[at : at + draw(st.integers(1, 8))]
        elif kind == "insert":
            data[at:at] = draw(st.sampled_from(TOKENS))
        elif kind == "repeat":
            data[at:at] = data[at : at + 40] * draw(st.integers(1, 30))
    return bytes(data)


def cut(data: bytes, points: list[int]) -> list[bytes]:
    cuts = sorted(p % (len(data) + 1) for p in points)
    return [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]


def run(pieces: list[bytes], authenticated: bool) -> tuple[list[Command], str | bool | None]:
    """Feed the pieces; check the invariants; return the commands and the error (False: none)."""
    parser = RequestParser(authenticated=authenticated, **LIMITS)
    commands: list[Command] = []
    for piece in pieces:
        parser.receive_data(piece)
        try:
            for command in parser.commands():
                assert isinstance(command, Command)
                assert command.args
                assert all(type(arg) is bytes for arg in command.args)
                commands.append(command)
        except RespProtocolError as exc:
            return commands, exc.message
        assert parser.buffered <= BOUND
    return commands, False


@settings(
    max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)  # fmt: skip
@given(hostile(), st.lists(st.integers(0, 10_000), max_size=20), st.booleans())
def test_parser_survives_hostile_input(data: bytes, points: list[int], authenticated: bool) -> None:
    whole = run([data], authenticated)
    assert run(cut(data, points), authenticated) == whole
    if len(data) < 400:
        assert run([data[i : i + 1] for i in range(len(data))], authenticated) == whole
