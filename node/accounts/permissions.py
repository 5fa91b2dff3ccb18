"""Publish and subscribe permissions, checked the way nats-server checks them.

Allow and deny lists are tries of patterns, and the subject being checked is matched against them
as a subject: a subscription to ``orders.*`` is allowed by ``orders.*``, ``orders.>`` or ``>``, but
not by ``orders.eu`` (a wildcard token is only matched by a wildcard). A wildcard subscription that
merely overlaps a denied subject is accepted, and the messages on denied subjects are filtered out
when they are delivered to it.

Redis pattern subscriptions are held to the same rules without filtering: a pattern is allowed
only when every channel it can match could be subscribed to on its own (``routing.reach``).
"""

from __future__ import annotations

from node.config.options import Permissions, SubjectRule
from routing import SubList, Subscription, subject_matches, subjects_collide
from routing.reach import ChannelRules, Verdict

__all__ = ["PermissionSet"]

_CACHE_MAX = 1024
_PATTERN_CACHE_MAX = 64
"""Fewer verdicts than subjects: each holds a pattern and a channel of up to a kilobyte or so."""


def _patterns(entries: tuple[str, ...]) -> SubList | None:
    """Entries as a trie; ``"subject queue"`` entries apply to that queue group only."""
    if not entries:
        return None
    sl = SubList()
    for entry in entries:
        subject, _, queue = entry.partition(" ")
        sl.insert(Subscription(subject, queue.strip() or None))
    return sl


def _queue_matches(pattern: str | None, queue: str) -> bool:
    """Queue names in permission entries may be wildcard patterns (``"jobs.> v1.*"``, ``"> >"``)."""
    return pattern is not None and (pattern == queue or subject_matches(pattern, queue))


def _plain(entries: tuple[str, ...]) -> list[str]:
    """The entries that apply to subscriptions outside queue groups, as channels' are."""
    return [subject for subject, _, queue in (e.partition(" ") for e in entries) if not queue.strip()]


class _Rule:
    __slots__ = ("allow", "deny", "deny_patterns", "rule")

    def __init__(self, rule: SubjectRule) -> None:
        self.rule = rule
        self.allow = _patterns(rule.allow)
        self.deny = _patterns(rule.deny)
        self.deny_patterns = tuple(e.partition(" ")[0] for e in rule.deny)


class PermissionSet:
    """One user's permissions, compiled for checking, with caches for the per-message checks."""

    __slots__ = ("_channel_rules", "_delivery_cache", "_pattern_cache", "_pub", "_pub_cache", "_sub")

    def __init__(self, permissions: Permissions) -> None:
        self._pub = _Rule(permissions.publish)
        self._sub = _Rule(permissions.subscribe)
        self._pub_cache: dict[bytes, bool] = {}
        self._delivery_cache: dict[bytes, bool] = {}
        self._pattern_cache: dict[bytes, Verdict] = {}
        self._channel_rules: ChannelRules | None = None

    def can_publish(self, subject: bytes) -> bool:
        allowed = self._pub_cache.get(subject)
        if allowed is None:
            text = subject.decode("utf-8", "surrogateescape")
            rule = self._pub
            allowed = (rule.allow is None or bool(rule.allow.match(text).plain)) and (
                rule.deny is None or not rule.deny.match(text).plain
            )
            if len(self._pub_cache) >= _CACHE_MAX:
                self._pub_cache.clear()
            self._pub_cache[subject] = allowed
        return allowed

    def can_subscribe(self, subject: str, queue: str | None) -> bool:
        rule = self._sub
        if rule.allow is not None:
            r = rule.allow.match(subject)
            allowed = bool(r.plain)
            if queue is not None and r.queues:
                allowed = any(_queue_matches(group[0].queue, queue) for group in r.queues)
            if not allowed:
                return False
        if rule.deny is not None:
            r = rule.deny.match(subject)
            if r.plain:
                return False
            if queue is not None and any(_queue_matches(group[0].queue, queue) for group in r.queues):
                return False
        return True

    def filters_deliveries(self, subject: str, queue: str | None) -> bool:
        """Whether deliveries to this (allowed) subscription must be checked against the deny list."""
        return any(subjects_collide(subject, denied) for denied in self._sub.deny_patterns) and (
            queue is not None or "*" in subject.split(".") or ">" in subject.split(".")
        )

    def can_receive(self, subject: bytes) -> bool:
        """Whether a message on ``subject`` may be delivered to a filtered subscription."""
        allowed = self._delivery_cache.get(subject)
        if allowed is None:
            deny = self._sub.deny
            allowed = deny is None or not deny.match(subject.decode("utf-8", "surrogateescape")).plain
            if len(self._delivery_cache) >= _CACHE_MAX:
                self._delivery_cache.clear()
            self._delivery_cache[subject] = allowed
        return allowed

    def can_psubscribe(self, pattern: bytes) -> bool:
        """Whether every channel the Redis ``pattern`` can match may be subscribed to (a pattern
        too costly to decide is refused)."""
        return self._pattern_verdict(pattern).allowed

    def refused_channel(self, pattern: bytes) -> bytes | None:
        """A channel that makes ``pattern`` refused (a shortest one), or None when the pattern is
        allowed or was refused as too costly to decide."""
        return self._pattern_verdict(pattern).witness

    def _pattern_verdict(self, pattern: bytes) -> Verdict:
        verdict = self._pattern_cache.get(pattern)
        if verdict is None:
            rules = self._channel_rules
            if rules is None:
                rule = self._sub.rule
                allow = _plain(rule.allow) if rule.allow else None
                rules = self._channel_rules = ChannelRules(allow, _plain(rule.deny))
            verdict = rules.check(pattern)
            if len(self._pattern_cache) >= _PATTERN_CACHE_MAX:
                self._pattern_cache.clear()
            self._pattern_cache[pattern] = verdict
        return verdict
