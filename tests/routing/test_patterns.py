"""PatternIndex against a brute-force model, and the property it exists for: publishes skip patterns.

The model is an insertion-ordered dict of pattern -> owners matched by trying every pattern, which
is what redis-server does on every PUBLISH.
"""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from routing import PatternIndex, glob_match
from routing.patterns import CACHE_CHANNEL_BYTES, CACHE_CHANNELS

PATTERN = st.lists(
    st.sampled_from([b"a", b"b", b".", b"ab.", b"*", b"?", b"[ab]", b"[a]", b"[]", b"\\*"]), max_size=5
)
CHANNEL = st.lists(st.sampled_from([b"a", b"b", b".", b"*", b"ab."]), max_size=6).map(b"".join)
OWNER = st.sampled_from(["c1", "c2", "c3"])


class PatternIndexMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.index: PatternIndex[str] = PatternIndex()
        self.model: dict[bytes, dict[str, None]] = {}

    @rule(parts=PATTERN, owner=OWNER)
    def add(self, parts: list[bytes], owner: str) -> None:
        pattern = b"".join(parts)
        assert self.index.add(pattern, owner) is (pattern not in self.model)
        self.model.setdefault(pattern, {})[owner] = None

    @rule(data=st.data(), owner=OWNER)
    def remove(self, data: st.DataObject, owner: str) -> None:
        known = sorted(self.model)
        pattern = data.draw(st.sampled_from(known) if known else PATTERN.map(b"".join))
        owners = self.model.get(pattern, {})
        was_owner = owner in owners
        owners.pop(owner, None)
        last = was_owner and not owners
        if last:
            del self.model[pattern]
        assert self.index.remove(pattern, owner) is last

    @rule(channel=CHANNEL)
    def match(self, channel: bytes) -> None:
        expected = [(p, list(o)) for p, o in self.model.items() if glob_match(p, channel)]
        assert self.index.match(channel) == expected

    @invariant()
    def same_patterns(self) -> None:
        assert self.index.patterns() == list(self.model)
        assert len(self.index) == len(self.model)

    @invariant()
    def trie_stays_compact(self) -> None:
        assert self.index.node_count() <= 2 * len(self.model) + 2

    @invariant()
    def every_node_holds_or_branches(self) -> None:
        """The radix property: a node with no pattern and one child would have been merged into it."""
        for trie in (self.index._by_prefix, self.index._by_suffix):
            stack = list(trie.root.children.values())
            while stack:
                node = stack.pop()
                assert node.label
                assert node.entries or len(node.children) > 1
                stack.extend(node.children.values())

    def teardown(self) -> None:
        for pattern, owners in list(self.model.items()):
            for owner in list(owners):
                self.index.remove(pattern, owner)
        assert len(self.index) == 0
        assert self.index.node_count() == 2


TestPatternIndexAgainstModel = pytest.mark.slow(PatternIndexMachine.TestCase)
TestPatternIndexAgainstModel.settings = settings(max_examples=300, stateful_step_count=40)


def test_owners_and_counts_follow_redis() -> None:
    index: PatternIndex[str] = PatternIndex()
    assert index.add(b"news.*", "c1")
    assert not index.add(b"news.*", "c2")
    assert not index.add(b"news.*", "c1")  # subscribing twice changes nothing
    assert index.add(b"*", "c1")
    assert len(index) == 2  # NUMPAT counts distinct patterns
    assert index.owners(b"news.*") == ["c1", "c2"]
    assert index.match(b"news.x") == [(b"news.*", ["c1", "c2"]), (b"*", ["c1"])]
    assert not index.remove(b"news.*", "c3")
    assert not index.remove(b"news.*", "c1")
    assert index.remove(b"news.*", "c2")
    assert not index.remove(b"news.*", "c2")
    assert index.match(b"news.x") == [(b"*", ["c1"])]
    assert index.match(b"") == []  # "*" needs one byte
    index.add(b"", "c3")
    assert index.match(b"") == [(b"", ["c3"])]


def test_delivery_order_is_first_subscription_order() -> None:
    index: PatternIndex[int] = PatternIndex()
    for n, pattern in enumerate([b"*.z", b"a.*", b"*", b"a.?", b"a\\.z", b"[a].z"]):
        index.add(pattern, n)
    assert [p for p, _ in index.match(b"a.z")] == [b"*.z", b"a.*", b"*", b"a.?", b"a\\.z", b"[a].z"]
    index.remove(b"*.z", 0)
    index.add(b"*.z", 9)
    assert [p for p, _ in index.match(b"a.z")][-1] == b"*.z"


@pytest.mark.slow
def test_a_publish_tries_only_patterns_that_can_match() -> None:
    index: PatternIndex[int] = PatternIndex()
    for n in range(10_000):
        index.add(b"tenant%d.*" % n, n)
        index.add(b"*.dev%d" % n, n)
        index.add(b"?x%d" % n, n)
        index.add(b"[]%d" % n, n)  # counted, never tried
    index.add(b"*", -1)
    tried = {entry.pattern for entry in index._candidates(b"tenant42.dev7")}
    assert tried == {b"tenant42.*", b"*.dev7", b"*"}
    assert [p for p, _ in index.match(b"tenant42.dev7")] == [b"*.dev7", b"tenant42.*", b"*"]
    assert index.node_count() <= 2 * len(index) + 2


def test_remembered_matches_follow_every_change() -> None:
    """A channel's matches are remembered, and forgotten whenever patterns or owners change."""
    index: PatternIndex[str] = PatternIndex()
    assert index.match(b"news.x") == []
    index.add(b"news.*", "c1")
    assert index.match(b"news.x") == [(b"news.*", ["c1"])]
    index.add(b"news.*", "c2")
    assert index.match(b"news.x") == [(b"news.*", ["c1", "c2"])]
    index.remove(b"news.*", "c1")
    assert index.match(b"news.x") == [(b"news.*", ["c2"])]
    index.remove(b"news.*", "c2")
    assert index.match(b"news.x") == []
    long_channel = b"news." + b"x" * (CACHE_CHANNEL_BYTES + 1)
    index.add(b"news.*", "c3")
    for n in range(CACHE_CHANNELS + 1):  # past the limit, the cache starts afresh
        assert index.match(b"news.%d" % n) == [(b"news.*", ["c3"])]
    assert index.match(long_channel) == [(b"news.*", ["c3"])]
    assert len(index._cache) <= CACHE_CHANNELS
    assert long_channel not in index._cache
