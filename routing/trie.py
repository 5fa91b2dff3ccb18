"""The subject trie both local and remote interest are indexed in, with its bounded match cache.

Each node holds its literal children by token and its ``*`` and ``>`` children in slots of their own,
so a literal token can never collide with a wildcard. Matching follows the literal child, the ``*``
child, and collects the ``>`` child at every level: the work depends on the subject's length and the
number of matching patterns, never on how many subscriptions the trie holds.

What a match returns is decided by the owner of the trie (a ``build`` function turning the matched
subscriptions into an immutable result): the local ``SubList`` wants subscriptions grouped by queue,
remote interest wants links and queue weights. Results are cached by subject, misses included, so the
steady-state publish path is one dict lookup.

Cache invalidation is targeted rather than wholesale: a change to a literal pattern can only affect the
cached entry for that exact subject, so only that entry goes; a change to a wildcard pattern could
affect any entry, so the cache is emptied (walking a thousand keys through a matcher in Python costs
more than rebuilding the few that are hot). ``genid`` grows with every change, so callers that keep
their own caches of results can tell when theirs went stale.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator
from typing import Generic, Protocol, TypeVar

from routing.stats import SubListStats
from routing.subjects import FWC, PWC, SEP, tokenize
from routing.subscription import Subscription

__all__ = ["MatchResult", "SubjectTrie"]

CACHE_MAX = 1024
"""Cached subjects above which the cache is swept (nats-server's ``slCacheMax``)."""
CACHE_SWEEP = 256
"""Entries a sweep leaves behind (nats-server's ``slCacheSweep``)."""


class MatchResult(Protocol):
    """What a trie's ``build`` function must produce: something immutable with a fan-out."""

    @property
    def fanout(self) -> int: ...


R = TypeVar("R", bound=MatchResult)

Groups = dict[str, list[Subscription]]
Builder = Callable[[list[Subscription], Groups], R]


Members = list[Subscription] | dict[Subscription, None]
"""Subscribers at one node: a list while small (64 bytes instead of a dict's 224), a dict-as-ordered-set
beyond ``_SMALL`` so that removing one of thousands stays O(1)."""

_SMALL = 8


class _Node:
    """One token position, kept small because a sparse trie is mostly chains of single children.

    ``children`` is None, the only literal child itself (a dict of one entry would cost 224 bytes),
    or a dict of two or more by token. Empty containers are None.
    """

    __slots__ = ("children", "fwc", "parent", "psubs", "pwc", "qsubs", "token")

    def __init__(self, token: str, parent: _Node | None) -> None:
        self.token = token
        self.parent = parent  # lets a removal prune upwards without recording its path
        self.children: _Node | dict[str, _Node] | None = None
        self.pwc: _Node | None = None
        self.fwc: _Node | None = None
        self.psubs: Members | None = None
        self.qsubs: dict[str, Members] | None = None

    def add_literal(self, token: str) -> _Node:
        children = self.children
        if isinstance(children, dict):
            found = children.get(token)
            if found is not None:
                return found
            child = children[token] = _Node(token, self)
        elif children is None:
            child = self.children = _Node(token, self)
        elif children.token == token:
            return children
        else:
            child = _Node(token, self)
            self.children = {children.token: children, token: child}
        return child

    def drop_literal(self, token: str) -> None:
        children = self.children
        if isinstance(children, dict):
            del children[token]
            if len(children) == 1:
                (self.children,) = children.values()
        else:
            self.children = None

    def is_empty(self) -> bool:
        return not (self.psubs or self.qsubs or self.children or self.pwc or self.fwc)


def _add_member(members: Members | None, sub: Subscription) -> Members:
    if members is None:
        return [sub]
    if isinstance(members, list):
        if len(members) < _SMALL:
            members.append(sub)
            return members
        members = dict.fromkeys(members)
    members[sub] = None
    return members


def _drop_member(members: Members, sub: Subscription) -> Members | None:
    if isinstance(members, list):
        members.remove(sub)
    else:
        del members[sub]
    return members or None


class SubjectTrie(Generic[R]):
    """A trie of subscriptions with a match cache; the shared engine of ``SubList`` and remote interest.

    Args:
        build: turns the plain subscriptions and queue groups (name -> members) of one match into
            the result handed out. Called only when something matched.
        empty: the result for a subject nothing matches; one shared object.
        cache: whether to cache match results by subject.
    """

    __slots__ = (
        "_build",
        "_cache",
        "_count",
        "_empty",
        "_hits",
        "_inserts",
        "_matches",
        "_removes",
        "_root",
        "genid",
    )

    def __init__(self, build: Builder[R], empty: R, *, cache: bool = True) -> None:
        self._build = build
        self._empty = empty
        self._root = _Node("", None)
        self._cache: dict[str, R] | None = {} if cache else None
        self._count = 0
        self.genid = 0
        """A number that grows with every change to what the trie would match (read it, never
        write it: callers keeping caches of results compare it to know when theirs went stale)."""
        self._inserts = 0
        self._removes = 0
        self._matches = 0
        self._hits = 0

    # -- changes -------------------------------------------------------------------------------

    def insert(self, sub: Subscription) -> None:
        """Add ``sub`` under its subject. Inserting the same subscription twice is a no-op.

        Raises:
            InvalidSubjectError: the subject breaks the token rules.
        """
        node = self._root
        for token in tokenize(sub.subject):
            if token == PWC:
                nxt = node.pwc
                if nxt is None:
                    nxt = node.pwc = _Node(token, node)
            elif token == FWC:
                nxt = node.fwc
                if nxt is None:
                    nxt = node.fwc = _Node(token, node)
            else:
                nxt = node.add_literal(token)
            node = nxt
        if sub.queue is None:
            if node.psubs is not None and sub in node.psubs:
                return
            node.psubs = _add_member(node.psubs, sub)
        else:
            if node.qsubs is None:
                node.qsubs = {}
            members = node.qsubs.get(sub.queue)
            if members is not None and sub in members:
                return
            node.qsubs[sub.queue] = _add_member(members, sub)
        self._count += 1
        self._inserts += 1
        self.invalidate(sub.subject)

    def remove(self, sub: Subscription) -> None:
        """Remove ``sub``, pruning nodes left empty.

        Raises:
            InvalidSubjectError: the subject breaks the token rules.
            KeyError: ``sub`` is not in the trie.
        """
        if not self._detach(sub):
            tokenize(sub.subject)  # an invalid subject is never stored: say which error it is
            raise KeyError(sub)
        self._count -= 1
        self._removes += 1
        self.invalidate(sub.subject)

    def remove_batch(self, subs: Iterable[Subscription]) -> int:
        """Remove every subscription of ``subs`` that is present; return how many were.

        Meant for a connection or link going away: one cache reset for the whole batch instead of
        one invalidation per subscription.
        """
        detach = self._detach
        removed = sum(1 for sub in subs if detach(sub))
        if removed:
            self._count -= removed
            self._removes += removed
            self.genid += 1
            if self._cache is not None:
                self._cache.clear()
        return removed

    def invalidate(self, subject: str) -> None:
        """Forget cached results ``subject`` may have contributed to; for in-place changes too.

        Remote interest calls this after changing a stored subscription's weight.
        """
        self.genid += 1
        cache = self._cache
        if cache:
            if PWC in subject or FWC in subject:
                cache.clear()
            else:
                cache.pop(subject, None)

    def _detach(self, sub: Subscription) -> bool:
        """Unlink ``sub`` and prune; False if it is not here (invalid subjects never are)."""
        node = self._root
        for token in sub.subject.split(SEP):
            children = node.children
            if isinstance(children, dict):
                nxt = children.get(token)
            elif children is not None and children.token == token:
                nxt = children
            else:
                nxt = None
            if nxt is None:  # a wildcard token is never a literal child
                if token == PWC:
                    nxt = node.pwc
                elif token == FWC:
                    nxt = node.fwc
                if nxt is None:
                    return False
            node = nxt
        if sub.queue is None:
            if node.psubs is None or sub not in node.psubs:
                return False
            node.psubs = _drop_member(node.psubs, sub)
        else:
            qsubs = node.qsubs
            members = qsubs.get(sub.queue) if qsubs is not None else None
            if qsubs is None or members is None or sub not in members:
                return False
            remaining = _drop_member(members, sub)
            if remaining is not None:
                qsubs[sub.queue] = remaining
            else:
                del qsubs[sub.queue]
                if not qsubs:
                    node.qsubs = None
        # Prune from the leaf up while nodes are left holding nothing.
        parent = node.parent
        while parent is not None and node.is_empty():
            if node is parent.pwc:
                parent.pwc = None
            elif node is parent.fwc:
                parent.fwc = None
            else:
                parent.drop_literal(node.token)
            node, parent = parent, parent.parent
        return True

    # -- queries -------------------------------------------------------------------------------

    def match(self, subject: str) -> R:
        """Everything interested in the literal ``subject``. The result never changes afterwards.

        A subject with an empty token matches nothing. Wildcard tokens in ``subject`` are taken
        literally: only wildcard patterns match them.
        """
        self._matches += 1
        cache = self._cache
        if cache is not None:
            cached = cache.get(subject)
            if cached is not None:
                self._hits += 1
                return cached
        tokens = subject.split(SEP)
        if "" in tokens:
            return self._empty
        plain: list[Subscription] = []
        queues: Groups = {}
        _collect(self._root, tokens, 0, len(tokens), plain, queues)
        result = self._build(plain, queues) if plain or queues else self._empty
        if cache is not None:
            cache[subject] = result
            if len(cache) > CACHE_MAX:
                for key in list(itertools.islice(cache, len(cache) - CACHE_SWEEP)):
                    del cache[key]
        return result

    def has_interest(self, subject: str) -> bool:
        """Whether anything matches ``subject``; stops at the first match and caches nothing."""
        cache = self._cache
        if cache is not None:
            cached = cache.get(subject)
            if cached is not None:
                self._matches += 1
                self._hits += 1
                return cached is not self._empty
        tokens = subject.split(SEP)
        if "" in tokens:
            return False
        return _any(self._root, tokens, 0, len(tokens))

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[Subscription]:
        """Every subscription held, in no promised order."""
        stack = [self._root]
        while stack:
            node = stack.pop()
            if node.psubs:
                yield from node.psubs
            if node.qsubs:
                for members in node.qsubs.values():
                    yield from members
            children = node.children
            if isinstance(children, dict):
                stack.extend(children.values())
            elif children is not None:
                stack.append(children)
            if node.pwc is not None:
                stack.append(node.pwc)
            if node.fwc is not None:
                stack.append(node.fwc)

    def depth(self) -> int:
        """Levels in use below the root: 0 when empty, so tests can see pruning happen."""

        def below(node: _Node) -> int:
            children = node.children
            kids = list(children.values()) if isinstance(children, dict) else [children]
            return 1 + max(
                (below(kid) for kid in (*kids, node.pwc, node.fwc) if kid is not None), default=0
            )

        return below(self._root) - 1

    def stats(self) -> SubListStats:
        """Counters in nats-server's ``SublistStats`` shape; fan-out is measured over cached results."""
        cached = list(self._cache.values()) if self._cache is not None else []
        fanouts = [r.fanout for r in cached]
        return SubListStats(
            num_subscriptions=self._count,
            num_cache=len(cached),
            num_inserts=self._inserts,
            num_removes=self._removes,
            num_matches=self._matches,
            cache_hit_rate=self._hits / self._matches if self._matches else 0.0,
            max_fanout=max(fanouts, default=0),
            avg_fanout=sum(fanouts) / len(fanouts) if fanouts else 0.0,
        )


def _collect(
    node: _Node, tokens: list[str], i: int, n: int, plain: list[Subscription], queues: Groups
) -> None:
    """Gather what matches ``tokens[i:]`` below ``node`` into ``plain`` and ``queues``."""
    while i < n:
        fwc = node.fwc
        if fwc is not None:
            _gather(fwc, plain, queues)
        pwc = node.pwc
        if pwc is not None:
            _collect(pwc, tokens, i + 1, n, plain, queues)
        children = node.children
        if isinstance(children, dict):
            nxt = children.get(tokens[i])
            if nxt is None:
                return
            node = nxt
        elif children is not None and children.token == tokens[i]:
            node = children
        else:
            return
        i += 1
    _gather(node, plain, queues)


def _gather(node: _Node, plain: list[Subscription], queues: Groups) -> None:
    if node.psubs:
        plain.extend(node.psubs)
    if node.qsubs:
        for name, members in node.qsubs.items():
            group = queues.get(name)
            if group is None:
                queues[name] = list(members)
            else:
                group.extend(members)


def _any(node: _Node, tokens: list[str], i: int, n: int) -> bool:
    """Whether anything matches ``tokens[i:]`` below ``node``; the early-exit twin of ``_collect``."""
    while i < n:
        fwc = node.fwc
        if fwc is not None and (fwc.psubs or fwc.qsubs):
            return True
        pwc = node.pwc
        if pwc is not None and _any(pwc, tokens, i + 1, n):
            return True
        children = node.children
        if isinstance(children, dict):
            nxt = children.get(tokens[i])
            if nxt is None:
                return False
            node = nxt
        elif children is not None and children.token == tokens[i]:
            node = children
        else:
            return False
        i += 1
    return bool(node.psubs or node.qsubs)
