"""``routing.reach`` against brute force: the glob matcher, the channel-to-subject mapping and the
plain subject-matching rule, run over every short channel of a small alphabet."""

from __future__ import annotations

import itertools
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from routing import GlobPattern, channel_subject, glob_match, subject_matches
from routing.reach import _VALID, ChannelRules, Verdict

# Channels over bytes that exercise every branch of the mapping: token text, the separator,
# wildcard tokens, whitespace, the reserved "$R." prefix and a byte that is never UTF-8.
CHANNEL_BYTES = b"a.*> $R\xff"
CHANNELS = [bytes(c) for n in range(1, 6) for c in itertools.product(CHANNEL_BYTES, repeat=n)]
GLOB_BYTES = b"ab.*?[]^-\\ $R0f>"
GLOB_PIECES = [b"a", b"b", b".", b"*", b"?", b"$R", b" ", b"\xff", b">", b"[ab]", b"[^a]", b"[a-b]"]
GLOB_PIECES += [b"\\*", b"[*>]", b"[.]", b"[^.]", b"\\", b"[", b"]", b"^", b"-"]
TOKENS = ["a", "b", "*", "$R", "20", "2a", "2e", "ff", "61", "6120", "612e", "aa", "a*"]


def refused(channel: bytes, allow: list[str] | None, deny: list[str]) -> bool:
    """The plain definition: SUBSCRIBE on the channel's subject would be refused."""
    subject = channel_subject(channel).decode()
    allowed = allow is None or any(subject_matches(a, subject) for a in allow)
    return not allowed or any(subject_matches(d, subject) for d in deny)


globs = st.lists(st.sampled_from(GLOB_BYTES), max_size=8).map(bytes) | st.lists(
    st.sampled_from(GLOB_PIECES), max_size=5
).map(b"".join)


@st.composite
def subject_patterns(draw: st.DrawFn) -> str:
    """Permission entries: plain token patterns, or subjects of channels that are not subjects."""
    if draw(st.booleans()):
        channel = draw(st.lists(st.sampled_from(CHANNEL_BYTES), min_size=1, max_size=3).map(bytes))
        return draw(st.sampled_from([f"$R.{channel.hex()}", "$R.*", "$R.>"]))
    tokens = draw(st.lists(st.sampled_from(TOKENS), min_size=1, max_size=3))
    if draw(st.booleans()):
        tokens.append(">")
    return ".".join(tokens)


rule_lists = st.lists(subject_patterns(), max_size=3)


def check_against_brute_force(
    pattern: bytes, allow: list[str] | None, deny: list[str], verdict: Verdict
) -> None:
    glob = GlobPattern(pattern)
    if verdict.allowed:
        denied = [c for c in CHANNELS if glob.match(c) and refused(c, allow, deny)]
        assert denied == [], f"allowed, yet it matches {denied[:5]}"
        return
    witness = verdict.witness
    assert witness is not None, "refused without a witness (budget exhausted on a tiny pattern)"
    assert glob_match(pattern, witness)
    assert refused(witness, allow, deny)
    # Breadth first: nothing shorter that the pattern matches is refused.
    shorter = [c for c in CHANNELS if len(c) < len(witness) and glob.match(c)]
    assert not [c for c in shorter if refused(c, allow, deny)]


@pytest.mark.slow
@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    pattern=globs,
    allow=st.none() | rule_lists,
    deny=rule_lists,
)
def test_agrees_with_brute_force(pattern: bytes, allow: list[str] | None, deny: list[str]) -> None:
    verdict = ChannelRules(allow, deny).check(pattern)
    check_against_brute_force(pattern, allow, deny, verdict)


UTF8_PIECES = [
    b"a",
    b".",
    b"*",
    b">",
    b" ",
    b"\t",
    b"\x0b",
    b"$",
    b"R",
    b"\xc3",
    b"\xa9",
    b"\xc0",
    b"\xe0",
]
UTF8_PIECES += [b"\xa0", b"\x80", b"\x9f", b"\xed", b"\xf0", b"\x90", b"\xf4", b"\x8f", b"\xbf", b"\xf5"]


@given(
    st.binary(max_size=8)
    | st.text(max_size=6).map(str.encode)
    | st.lists(st.sampled_from(UTF8_PIECES), max_size=8).map(b"".join)
)
def test_valid_subject_automaton_is_the_mapping(channel: bytes) -> None:
    assert_is_the_mapping(channel)


def assert_is_the_mapping(channel: bytes) -> None:
    accepted = bool(_VALID.run(_VALID.start, channel) & _VALID.accept)
    assert accepted == (channel_subject(channel) == channel)


EDGES_OF_UTF8 = [b"\xed\x9f\xbf", b"\xed\xa0\x80", b"\xe0\x9f\xbf", b"\xe0\xa0\x80", b"\xc1\xbf"]
EDGES_OF_UTF8 += [b"\xc2\x80", b"\xf0\x8f\xbf\xbf", b"\xf0\x90\x80\x80", b"\xf4\x8f\xbf\xbf"]
EDGES_OF_UTF8 += [b"\xf4\x90\x80\x80", b"\xf5\x80\x80\x80", b"\xef\xbf\xbf", b"\xc3", b"\xe2\x82"]


@pytest.mark.parametrize("channel", [*EDGES_OF_UTF8, b"$R.a", b"$R", b"$Ra.b", b"a.$R.b", b"\x0b"])
def test_valid_subject_automaton_at_the_edges(channel: bytes) -> None:
    assert_is_the_mapping(channel)


@pytest.mark.parametrize(
    ("allow", "deny", "pattern", "witness"),
    [
        # '*' also matches nothing at all, so "orders." (an empty token: "$R." space) is reachable.
        (["orders.>"], [], b"orders.*", b"orders."),
        (["orders.>"], [], b"orders.[a-z][a-z]", None),
        (["orders.>"], [], b"orders.?", b"orders. "),
        (["orders.>"], [], b"orders.x", None),
        (["orders.>"], [], b"orders.\\*", b"orders.*"),  # a '*' token is not a literal subject
        (["orders.>", "$R.>"], [], b"orders.*", None),  # the channels that are not subjects too
        (["orders.*"], [], b"orders.[a-z]", None),
        (["orders.>"], [], b"orders.[a-z].[a-z]", None),  # '>' takes any number of tokens
        (None, ["orders.>"], b"orders.?.?", b"orders.a.a"),
        (["orders.*"], [], b"orders.[a-z]*", b"orders.a "),
        (None, ["secret.>"], b"news.*", None),
        (None, ["secret.>"], b"*", b"secret.a"),
        (None, ["secret.>"], b"[a-r]*", None),
        (None, ["secret.>"], b"[^n]*", b"secret.a"),
        (None, ["*.private"], b"user.[0-9]*", None),
        (None, ["*.*.private"], b"user.[0-9]*", b"user.0.private"),
        (None, ["$R.>"], b"a*", b"a "),
        (["$R.6120"], [], b"a ", None),  # "a " is not a subject: it travels as $R.6120
        (["$R.6120"], [], b"a?", b"aa"),
        (["$R.x"], [], b"$R.x", b"$R.x"),  # a channel under "$R." is not its own subject
        (["$R.24522e78"], [], b"$R.x", None),
        (["$R.0"], [], b"", None),  # the empty pattern matches the empty channel alone
        (["a"], [], b"", b""),
        (["a"], [], b"[]", None),  # an empty set matches nothing, so nothing is refused
        (["a"], [], b"a[", None),
        (["\u00e9.>"], [], "\u00e9.[a-z]".encode(), None),
        (["\u00e9.>"], [], b"\xc3?.a", b"\xc3\x80.a"),
        (["\u00e9.>", "$R.>"], [], b"\xc3?.a", b"\xc3\x80.a"),
        ([">"], [], b"*", None),  # every channel's subject, "$R." ones included
        ([">"], ["a"], b"?", b"a"),
        ([], [], b"x", b"x"),  # an allow list of queue entries only allows no channel
    ],
)
def test_hand_written(
    allow: list[str] | None, deny: list[str], pattern: bytes, witness: bytes | None
) -> None:
    verdict = ChannelRules(allow, deny).check(pattern)
    assert verdict == Verdict(witness is None, witness)
    check_against_brute_force(pattern, allow, deny, verdict)


HOSTILE = [
    b"*a" * 512,
    b"[^a]" * 256,
    b"*?" * 512,
    b"?" * 1024,
    b"*" * 1024,
    b"orders." + b"*a" * 508,
    b"*a" + b"?" * 1022,
    b"*a" + b"[ab]" * 255,
    b"*" + b"a?*" * 341,
    b"*[\x80-\xff]" * 170,
    b"[" * 1024,
    b"\\" * 1024,
]


@pytest.mark.timeout(10)
@pytest.mark.parametrize("pattern", HOSTILE, ids=range(len(HOSTILE)))
@pytest.mark.parametrize(
    ("allow", "deny"),
    [(["orders.>"], []), (None, ["z.q"]), (["a.>", "*.b.*", "$R.>"], ["a.b.>"])],
    ids=["allow", "deny", "mixed"],
)
def test_hostile_patterns_end_within_the_budget(
    pattern: bytes, allow: list[str] | None, deny: list[str]
) -> None:
    verdict = ChannelRules(allow, deny).check(pattern)
    if verdict.witness is not None:
        assert glob_match(pattern, verdict.witness)
        assert refused(verdict.witness, allow, deny)


def test_a_pattern_too_costly_to_decide_is_refused_without_witness() -> None:
    """``*a`` then 20 ``?`` needs a set of states per pattern of the last 21 bytes: over budget."""
    rules = ChannelRules(None, ["z.q"])
    assert rules.check(b"*a" + b"?" * 20) == Verdict(False, None)
    assert rules.check(b"*a" + b"?" * 4) == Verdict(True)  # the same shape, small enough to decide
    assert rules.check(b"*a" + b"?" * 4, max_work=100) == Verdict(False, None)


@pytest.mark.slow
@pytest.mark.timeout(30)
def test_the_budget_bounds_memory() -> None:
    """The costliest shape there is, searched until the budget runs out, stays within a few MB."""
    rules = ChannelRules(None, ["z.q"])
    tracemalloc.start()
    try:
        assert rules.check(b"*a" + b"?" * 1022) == Verdict(False, None)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 32 * 1024 * 1024
