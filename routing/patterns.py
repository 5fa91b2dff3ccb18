"""Pattern subscriptions (Redis PSUBSCRIBE) indexed so a publish looks only at patterns that can match.

redis-server tests every pattern against every published channel, so a few thousand patterns cap
it at a few thousand publishes a second. Here each pattern is filed under the bytes any matching
channel must start with (its literal prefix) in a radix trie: a channel walks the trie along its
own bytes and meets only the patterns whose prefix it starts with, whatever else is stored.
Patterns that begin with a wildcard are filed the same way under their literal suffix, in a
trie over reversed bytes; only patterns with neither (``*``, ``?x?``) are tried on every publish.

What a channel matches is remembered until the patterns change, since publishers repeat channels:
a publish on a channel seen before costs one dictionary lookup, however many patterns there are.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Final, Generic, TypeVar

from routing.glob import GlobPattern

__all__ = ["PatternIndex"]

T = TypeVar("T", bound=Hashable)

CACHE_CHANNELS: Final = 1024
"""Channels whose matches are remembered at most (then forgotten all at once)."""
CACHE_CHANNEL_BYTES: Final = 256
"""Longer channels are matched every time rather than remembered (the cache stays small)."""


class _Entry(Generic[T]):
    """One distinct pattern: its compiled form, who subscribed, and when it first appeared."""

    __slots__ = ("glob", "owners", "pattern", "seq")

    def __init__(self, pattern: bytes, seq: int) -> None:
        self.pattern = pattern
        self.glob = GlobPattern(pattern)
        self.seq = seq
        self.owners: dict[T, None] = {}


def _seq(entry: _Entry[T]) -> int:
    return entry.seq


class _Node(Generic[T]):
    __slots__ = ("children", "entries", "label")

    def __init__(self, label: bytes) -> None:
        self.label = label
        """The bytes on the edge into this node (never empty, except at the root)."""
        self.children: dict[int, _Node[T]] = {}
        """Child nodes by the first byte of their label."""
        self.entries: dict[bytes, _Entry[T]] = {}
        """Patterns whose key ends exactly here."""


def _common(a: bytes, b: bytes) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class _RadixTrie(Generic[T]):
    """Entries under byte-string keys; ``collect`` finds those whose key is a prefix of a string.

    Edges carry runs of bytes and every node holds entries or branches, so there are fewer nodes
    than twice the keys and a walk costs at most one step per byte of the string.
    """

    __slots__ = ("root",)

    def __init__(self) -> None:
        self.root: _Node[T] = _Node(b"")

    def insert(self, key: bytes, entry: _Entry[T]) -> None:
        node = self.root
        i = 0
        while i < len(key):
            child = node.children.get(key[i])
            if child is None:
                child = _Node(key[i:])
                node.children[key[i]] = child
                node = child
                break
            shared = _common(child.label, key[i:])
            if shared < len(child.label):
                split: _Node[T] = _Node(child.label[:shared])
                child.label = child.label[shared:]
                split.children[child.label[0]] = child
                node.children[key[i]] = split
                child = split
            node = child
            i += shared
        node.entries[entry.pattern] = entry

    def discard(self, key: bytes, pattern: bytes) -> None:
        """Remove the entry, then the nodes it leaves empty and the joints it leaves unbranched."""
        path = [self.root]
        i = 0
        while i < len(key):
            node = path[-1].children[key[i]]
            path.append(node)
            i += len(node.label)
        del path[-1].entries[pattern]
        for depth in range(len(path) - 1, 0, -1):
            node, parent = path[depth], path[depth - 1]
            if node.entries:
                break
            if not node.children:
                del parent.children[node.label[0]]
            elif len(node.children) == 1:
                (only,) = node.children.values()
                only.label = node.label + only.label
                parent.children[node.label[0]] = only
                break
            else:
                break

    def collect(self, string: bytes, out: list[_Entry[T]]) -> None:
        node = self.root
        out.extend(node.entries.values())
        i = 0
        n = len(string)
        while i < n:
            child = node.children.get(string[i])
            if child is None or not string.startswith(child.label, i):
                return
            node = child
            out.extend(node.entries.values())
            i += len(node.label)

    def node_count(self) -> int:
        count = 0
        stack = [self.root]
        while stack:
            node = stack.pop()
            count += 1
            stack.extend(node.children.values())
        return count


class PatternIndex(Generic[T]):
    """Who subscribed to which glob pattern, and which patterns a channel matches.

    Owners are any hashable value (a connection, a client id). Patterns match case-sensitively,
    as Redis matches PSUBSCRIBE patterns (see ``routing.glob``).
    """

    __slots__ = ("_by_prefix", "_by_suffix", "_cache", "_entries", "_next_seq")

    def __init__(self) -> None:
        self._entries: dict[bytes, _Entry[T]] = {}
        self._cache: dict[bytes, list[tuple[bytes, list[T]]]] = {}
        """What ``match`` found per channel since the patterns or their owners last changed."""
        self._by_prefix: _RadixTrie[T] = _RadixTrie()
        self._by_suffix: _RadixTrie[T] = _RadixTrie()
        """Patterns with no literal prefix, under their reversed literal suffix (maybe empty)."""
        self._next_seq = 0

    def __len__(self) -> int:
        """Distinct patterns, as Redis's PUBSUB NUMPAT counts them."""
        return len(self._entries)

    def patterns(self) -> list[bytes]:
        """Distinct patterns in the order they first appeared."""
        return list(self._entries)

    def owners(self, pattern: bytes) -> list[T]:
        """Who subscribed to ``pattern``, in subscription order (empty when nobody did)."""
        entry = self._entries.get(pattern)
        return [] if entry is None else list(entry.owners)

    def subscribed(self, pattern: bytes, owner: T) -> bool:
        """Whether ``owner`` holds ``pattern``."""
        entry = self._entries.get(pattern)
        return entry is not None and owner in entry.owners

    def add(self, pattern: bytes, owner: T) -> bool:
        """Subscribe ``owner`` to ``pattern`` (again is harmless); True when the pattern is new."""
        self._cache.clear()
        entry = self._entries.get(pattern)
        if entry is not None:
            entry.owners[owner] = None
            return False
        entry = _Entry(pattern, self._next_seq)
        self._next_seq += 1
        entry.owners[owner] = None
        self._entries[pattern] = entry
        filed = self._filing(entry)
        if filed is not None:
            filed[0].insert(filed[1], entry)
        return True

    def remove(self, pattern: bytes, owner: T) -> bool:
        """Unsubscribe ``owner`` (if subscribed); True when that leaves the pattern with no owner."""
        entry = self._entries.get(pattern)
        if entry is None or owner not in entry.owners:
            return False
        self._cache.clear()
        del entry.owners[owner]
        if entry.owners:
            return False
        del self._entries[pattern]
        filed = self._filing(entry)
        if filed is not None:
            filed[0].discard(filed[1], pattern)
        return True

    def _filing(self, entry: _Entry[T]) -> tuple[_RadixTrie[T], bytes] | None:
        """Which trie holds the pattern and under what key.

        None for a pattern that matches nothing (such as ``[]``): Redis still counts it, but no
        publish needs to try it.
        """
        glob = entry.glob
        if glob.matches_nothing:
            return None
        if glob.literal_prefix:
            return self._by_prefix, glob.literal_prefix
        return self._by_suffix, glob.literal_suffix[::-1]

    def match(self, channel: bytes) -> Sequence[tuple[bytes, Sequence[T]]]:
        """Each distinct pattern matching ``channel`` once with its owners, oldest pattern first.

        Only patterns whose literal prefix starts the channel, or whose literal suffix ends it,
        are tried, plus those with neither. The answer may be a remembered one, shared with
        later calls: read it, never change it (later changes to the index leave it as it was).
        """
        cache = self._cache
        known = cache.get(channel)
        if known is not None:
            return known
        found = [entry for entry in self._candidates(channel) if entry.glob.match(channel)]
        if len(found) > 1:
            found.sort(key=_seq)
        matches = [(entry.pattern, list(entry.owners)) for entry in found]
        if len(channel) <= CACHE_CHANNEL_BYTES:
            if len(cache) >= CACHE_CHANNELS:
                cache.clear()
            cache[channel] = matches
        return matches

    def _candidates(self, channel: bytes) -> list[_Entry[T]]:
        """The patterns a publish on ``channel`` has to try."""
        candidates: list[_Entry[T]] = []
        self._by_prefix.collect(channel, candidates)
        unanchored = self._by_suffix.root
        if unanchored.children:
            self._by_suffix.collect(channel[::-1], candidates)
        else:
            candidates.extend(unanchored.entries.values())
        return candidates

    def node_count(self) -> int:
        """Trie nodes in use (roots included): bounded by twice the number of patterns, plus two."""
        return self._by_prefix.node_count() + self._by_suffix.node_count()
