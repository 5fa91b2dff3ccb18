"""What peers told us they want: interest learned over links, keyed by (link, account, subject, queue).

Each account's remote interest lives in its own ``SubjectTrie``, so asking "which links want this
subject?" costs what a local match costs, however many remote entries there are. Each link also
keeps its own index of what it announced (the way Redis keeps each client's own channel set), so
dropping a link, or one account's slice of a link, touches only that slice.

Interest is binary per (link, account, subject) for plain interest, which makes a repeated RS+
harmless; queue interest carries a weight (the far side's member count) that a repeated RS+ updates.

Redis pattern interest arrives as interest in a ``$R.P.<hex>`` subject (``routing.channels``). It is
kept with the link's other entries, so withdrawals, dropped links and snapshots treat it alike, but it
is filed in the account's ``PatternIndex`` instead of its trie: a subject's match adds the links with
a pattern matching the subject's channel exactly, so a publish crosses a link only when something on
the far side wants it.

Links are whatever the caller names them by (``RemoteInterest[L]``: the node's route peers and
gateways, strings in tests). Each entry in a trie is a ``Subscription`` that also records its link
(``_Held``); the trie's records are not generic (see ``routing.subscription``), so the link comes
back out of a match as a plain hashable, and ``match_remote`` gives it back its type: only this
table files entries, so every link in it is an ``L``.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Iterator, Mapping
from types import MappingProxyType
from typing import Final, Generic, Never, TypeVar, cast, final

import attrs

from routing.channels import subject_channel, subject_pattern
from routing.glob import MAX_PATTERN
from routing.patterns import PatternIndex
from routing.stats import SubListStats
from routing.subjects import InvalidSubjectError
from routing.subscription import Subscription
from routing.trie import Groups, SubjectTrie

__all__ = ["EMPTY_MATCH", "RemoteEntry", "RemoteInterest", "RemoteMatch"]

L = TypeVar("L", bound=Hashable)
L_co = TypeVar("L_co", bound=Hashable, covariant=True)

_NO_QUEUES: Final[Mapping[str, Never]] = MappingProxyType({})


@final
class RemoteMatch(Generic[L_co]):
    """Which links lead to interest in a subject; never changed once made.

    A plain class, not an attrs record: compiled, it is a native object, whose fields the publish
    path reads for every message without looking them up by name.

    Attributes:
        links: links with plain interest, each once, in the order their interest was learned.
        queues: queue name -> ``(link, weight)`` pairs; a link's weight is the sum over all its
            matching patterns, i.e. how many members of the group it stands for.
    """

    __slots__ = ("links", "queues")

    def __init__(
        self,
        links: tuple[L_co, ...] = (),
        queues: Mapping[str, tuple[tuple[L_co, int], ...]] = _NO_QUEUES,
    ) -> None:
        self.links: Final = links
        self.queues: Final = queues

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, RemoteMatch) and self.links == other.links and self.queues == other.queues
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"RemoteMatch({self.links!r}, {dict(self.queues)!r})"

    @property
    def fanout(self) -> int:
        return len(self.links) + len(self.queues)

    def __bool__(self) -> bool:
        return bool(self.links or self.queues)


@attrs.frozen(slots=True)
class RemoteEntry(Generic[L]):
    """One piece of remote interest, as a snapshot or a monitoring endpoint lists it."""

    link: L
    account: str
    subject: str
    queue: str | None
    weight: int


EMPTY_MATCH: Final[RemoteMatch[Never]] = RemoteMatch()
"""The one result for "no link wants it"."""


class _Held(Subscription):
    """A piece of remote interest as an account's trie holds it: a subscription for ``link``."""

    __slots__ = ("link",)

    def __init__(self, subject: str, queue: str | None, link: Hashable, weight: int) -> None:
        super().__init__(subject, queue, weight=weight)
        self.link = link


def _build(plain: list[Subscription], queues: Groups) -> RemoteMatch[Hashable]:
    """A match from the entries of one of this module's tries (every one of them ``_Held``)."""
    links = tuple({cast(_Held, sub).link: None for sub in plain})
    groups: dict[str, tuple[tuple[Hashable, int], ...]] = {}
    for name, members in queues.items():
        weights: dict[Hashable, int] = {}
        for sub in members:
            link = cast(_Held, sub).link
            weights[link] = weights.get(link, 0) + sub.weight
        groups[name] = tuple(weights.items())
    return RemoteMatch(links, MappingProxyType(groups) if groups else _NO_QUEUES)


# link's slice: account -> (subject, queue) -> the entry stored in that account's trie
_Slice = dict[str, dict[tuple[str, str | None], _Held]]


class RemoteInterest(Generic[L]):
    """Remote interest of every account, indexed for matching and for dropping a link's slice.

    Links are any hashable value that names where interest came from (a route or gateway
    connection object, a server id).
    """

    __slots__ = ("_accounts", "_by_link", "_cache", "_count", "_patterns", "genid")

    def __init__(self, *, cache: bool = True) -> None:
        self._cache = cache
        self._accounts: dict[str, SubjectTrie[RemoteMatch[Hashable]]] = {}
        self._patterns: dict[str, PatternIndex[L]] = {}
        """Each account's pattern interest, once it has any: pattern -> the links that want it."""
        self._by_link: dict[L, _Slice] = {}
        self._count = 0
        self.genid = 0
        """A number that grows with every change, in any account (tries come and go with accounts,
        so their own counters could repeat a value; this one never does). Read it, never write it."""

    def apply_remote_sub(
        self,
        link: L,
        account: str,
        subject: str,
        queue: str | None = None,
        weight: int = 1,
        remove: bool = False,
    ) -> bool:
        """Record an RS+ (or with ``remove``, an RS-) from ``link``; return whether anything changed.

        A plain add that is already known changes nothing; a queue add that is already known sets
        the new weight. Removing unknown interest changes nothing.

        Raises:
            InvalidSubjectError: ``subject`` breaks the token rules, or is pattern interest that is
                misspelled or names a queue (on add).
            ValueError: a queue add with a weight below 1.
        """
        if remove:
            return self._remove(link, account, subject, queue)
        pattern = _pattern(subject, queue)
        if queue is None:
            weight = 1
        elif weight < 1:
            raise ValueError(f"queue weight must be at least 1, not {weight}")
        key = (subject, queue)
        entries = self._by_link.get(link, {}).get(account)
        known = entries.get(key) if entries is not None else None
        if known is not None:
            if known.weight == weight:
                return False
            known.weight = weight
            self._accounts[account].invalidate(subject)
            self.genid += 1
            return True
        sub = _Held(subject, queue, link, weight)
        if pattern is not None:
            self._patterns.setdefault(account, PatternIndex()).add(pattern, link)
        else:
            trie = self._accounts.get(account)
            if trie is None:
                trie = SubjectTrie(_build, EMPTY_MATCH, cache=self._cache)
            trie.insert(sub)  # validates before anything is recorded
            self._accounts[account] = trie
        self._by_link.setdefault(link, {}).setdefault(account, {})[key] = sub
        self._count += 1
        self.genid += 1
        return True

    def update_remote_qsub(self, link: L, account: str, subject: str, queue: str, weight: int) -> None:
        """Set the weight of queue interest already known from ``link``.

        Raises:
            KeyError: no such queue interest from that link.
            ValueError: a weight below 1 (withdraw the interest instead).
        """
        if weight < 1:
            raise ValueError(f"queue weight must be at least 1, not {weight}")
        sub = self._by_link[link][account][(subject, queue)]
        if sub.weight != weight:
            sub.weight = weight
            self._accounts[account].invalidate(subject)
            self.genid += 1

    def _remove(self, link: L, account: str, subject: str, queue: str | None) -> bool:
        slices = self._by_link.get(link)
        if slices is None:
            return False
        entries = slices.get(account)
        sub = entries.pop((subject, queue), None) if entries is not None else None
        if entries is None or sub is None:
            return False
        self._unfile(link, account, [sub])
        self._count -= 1
        self.genid += 1
        if not entries:
            self._forget(link, slices, account)
        return True

    def remove_remote_subs(self, link: L) -> int:
        """Drop everything ``link`` announced (it went away); return how many entries went."""
        slices = self._by_link.pop(link, None)
        if slices is None:
            return 0
        return sum(self._drop(link, account, entries) for account, entries in slices.items())

    def remove_remote_subs_for_account(self, link: L, account: str) -> int:
        """Drop what ``link`` announced for one account; return how many entries went."""
        slices = self._by_link.get(link)
        entries = slices.get(account) if slices is not None else None
        if slices is None or entries is None:
            return 0
        self._forget(link, slices, account)
        return self._drop(link, account, entries)

    def _drop(self, link: L, account: str, entries: dict[tuple[str, str | None], _Held]) -> int:
        self._unfile(link, account, entries.values())
        self._count -= len(entries)
        self.genid += 1
        return len(entries)

    def _unfile(self, link: L, account: str, subs: Iterable[_Held]) -> None:
        """Take ``link``'s entries out of the account's trie or pattern index; drop either once
        empty."""
        plain: list[Subscription] = []
        for sub in subs:
            pattern = subject_pattern(sub.subject)  # (spelled right: it was accepted)
            if pattern is None:
                plain.append(sub)
            else:
                index = self._patterns[account]
                index.remove(pattern, link)
                if not len(index):
                    del self._patterns[account]
        if plain:
            trie = self._accounts[account]
            if len(plain) == 1:
                trie.remove(plain[0])
            else:
                trie.remove_batch(plain)
            if not len(trie):
                del self._accounts[account]

    def _forget(self, link: L, slices: _Slice, account: str) -> None:
        del slices[account]
        if not slices:
            del self._by_link[link]

    # -- queries -------------------------------------------------------------------------------

    def has_remote_interest(self, account: str, subject: str) -> bool:
        """Whether any link wants ``subject`` in ``account``."""
        trie = self._accounts.get(account)
        if trie is not None and trie.has_interest(subject):
            return True
        return account in self._patterns and bool(self.match_remote(account, subject))

    def match_remote(self, account: str, subject: str) -> RemoteMatch[L]:
        """Links with plain interest in ``subject`` (or a pattern matching its channel) and queue
        groups with their weights per link."""
        trie = self._accounts.get(account)
        found: RemoteMatch[L] = (
            EMPTY_MATCH if trie is None else cast("RemoteMatch[L]", trie.match(subject))
        )
        index = self._patterns.get(account)
        if index is None:
            return found
        channel = subject_channel(subject.encode("utf-8", "surrogateescape"))
        wanted = [link for _, links in index.match(channel) for link in links]
        if not wanted:
            return found
        links = tuple(dict.fromkeys((*found.links, *wanted)))
        return RemoteMatch(links, found.queues) if links != found.links else found

    def __len__(self) -> int:
        return self._count

    def links(self) -> list[L]:
        """Links that currently hold interest."""
        return list(self._by_link)

    def weight(self, link: L, account: str, subject: str, queue: str | None = None) -> int:
        """The weight of one piece of interest from ``link`` (1 for plain), 0 if there is none."""
        sub = self._by_link.get(link, {}).get(account, {}).get((subject, queue))
        return sub.weight if sub is not None else 0

    def count(self, link: L) -> int:
        """How many entries ``link`` holds."""
        return sum(len(entries) for entries in self._by_link.get(link, {}).values())

    def entries(self, link: L | None = None, account: str | None = None) -> Iterator[RemoteEntry[L]]:
        """Every entry, or those of one link (and account), for snapshots, monitoring and checks."""
        links = [link] if link is not None else list(self._by_link)
        for each in links:
            for name, entries in list(self._by_link.get(each, {}).items()):
                if account is None or name == account:
                    for (subject, queue), sub in list(entries.items()):
                        yield RemoteEntry(each, name, subject, queue, sub.weight)

    def stats(self) -> SubListStats:
        """Trie counters summed over accounts."""
        return SubListStats.combine(trie.stats() for trie in self._accounts.values())


def _pattern(subject: str, queue: str | None) -> bytes | None:
    """The pattern of pattern interest (None for subject interest), refusing misspelled ones."""
    try:
        pattern = subject_pattern(subject)
    except ValueError as exc:
        raise InvalidSubjectError(str(exc)) from None
    if pattern is not None and queue is not None:
        raise InvalidSubjectError(f"pattern interest {subject!r} cannot name a queue group")
    if pattern is not None and len(pattern) > MAX_PATTERN:
        raise InvalidSubjectError(f"pattern interest longer than {MAX_PATTERN} bytes")
    return pattern
