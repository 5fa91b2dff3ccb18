"""Remote interest: RS+/RS- bookkeeping, matching, and dropping a link's or an account's slice."""

from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from routing import (
    InvalidSubjectError,
    RemoteEntry,
    RemoteInterest,
    Subscription,
    channel_subject,
    glob_match,
    pattern_subject,
    subject_channel,
    subject_matches,
    subject_pattern,
)
from routing.trie import SubjectTrie

G = "$G"


def test_plain_add_is_idempotent() -> None:
    ri: RemoteInterest[str] = RemoteInterest()
    assert ri.apply_remote_sub("r1", G, "foo")
    assert not ri.apply_remote_sub("r1", G, "foo")
    assert len(ri) == 1
    assert ri.match_remote(G, "foo").links == ("r1",)


def test_queue_add_updates_weight() -> None:
    ri: RemoteInterest[str] = RemoteInterest()
    assert ri.apply_remote_sub("r1", G, "foo", "q", 3)
    assert ri.match_remote(G, "foo").queues == {"q": (("r1", 3),)}
    assert not ri.apply_remote_sub("r1", G, "foo", "q", 3)
    assert ri.apply_remote_sub("r1", G, "foo", "q", 5)
    assert ri.match_remote(G, "foo").queues == {"q": (("r1", 5),)}
    ri.update_remote_qsub("r1", G, "foo", "q", 1)
    assert ri.match_remote(G, "foo").queues == {"q": (("r1", 1),)}
    assert len(ri) == 1


def test_weight_change_does_not_alter_results_already_handed_out() -> None:
    ri: RemoteInterest[str] = RemoteInterest()
    ri.apply_remote_sub("r1", G, "foo.*", "q", 2)
    before = ri.match_remote(G, "foo.bar")
    ri.update_remote_qsub("r1", G, "foo.*", "q", 7)
    assert before.queues == {"q": (("r1", 2),)}
    assert ri.match_remote(G, "foo.bar").queues == {"q": (("r1", 7),)}


def test_update_unknown_queue_interest_raises() -> None:
    ri: RemoteInterest[str] = RemoteInterest()
    with pytest.raises(KeyError):
        ri.update_remote_qsub("r1", G, "foo", "q", 2)
    ri.apply_remote_sub("r1", G, "foo", "q", 2)
    with pytest.raises(ValueError, match="at least 1"):
        ri.update_remote_qsub("r1", G, "foo", "q", 0)
    with pytest.raises(ValueError, match="at least 1"):
        ri.apply_remote_sub("r1", G, "bar", "q", 0)


def test_invalid_subject_records_nothing() -> None:
    ri: RemoteInterest[str] = RemoteInterest()
    with pytest.raises(InvalidSubjectError):
        ri.apply_remote_sub("r1", G, "foo..bar")
    assert len(ri) == 0
    assert ri.links() == []


def test_remove() -> None:
    ri: RemoteInterest[str] = RemoteInterest()
    ri.apply_remote_sub("r1", G, "foo")
    ri.apply_remote_sub("r1", G, "foo", "q", 2)
    assert not ri.apply_remote_sub("r1", G, "foo", "other", remove=True)
    assert not ri.apply_remote_sub("r2", G, "foo", remove=True)
    assert ri.apply_remote_sub("r1", G, "foo", remove=True)
    assert not ri.match_remote(G, "foo").links
    assert ri.has_remote_interest(G, "foo")  # the queue interest is still there
    assert ri.apply_remote_sub("r1", G, "foo", "q", remove=True)
    assert not ri.has_remote_interest(G, "foo")
    assert len(ri) == 0
    assert ri.links() == []


def test_links_are_deduplicated_and_queue_weights_summed() -> None:
    ri: RemoteInterest[str] = RemoteInterest()
    ri.apply_remote_sub("r1", G, "foo.*")
    ri.apply_remote_sub("r1", G, "foo.>")
    ri.apply_remote_sub("r2", G, ">")
    ri.apply_remote_sub("r1", G, "foo.bar", "q", 2)
    ri.apply_remote_sub("r1", G, "*.bar", "q", 3)
    ri.apply_remote_sub("r2", G, "foo.bar", "q", 1)
    m = ri.match_remote(G, "foo.bar")
    assert sorted(m.links) == ["r1", "r2"]
    assert dict(m.queues["q"]) == {"r1": 5, "r2": 1}
    assert m.fanout == 3


def test_accounts_are_separate() -> None:
    ri: RemoteInterest[str] = RemoteInterest()
    ri.apply_remote_sub("r1", "A", "foo")
    assert ri.has_remote_interest("A", "foo")
    assert not ri.has_remote_interest("B", "foo")
    assert not ri.match_remote("B", "foo")


def test_remote_queue_weights_like_nats_server() -> None:
    # After TestSublistRemoteQueueSubscriptions: two links with 10 members each make one group of
    # weight 20, counted as two entries; one withdrawing and the other shrinking to 1 leaves 1.
    ri: RemoteInterest[str] = RemoteInterest()
    ri.apply_remote_sub("r1", G, "foo", "bar", 10)
    ri.apply_remote_sub("r2", G, "foo", "bar", 10)
    assert sum(w for _, w in ri.match_remote(G, "foo").queues["bar"]) == 20
    assert len(ri) == 2
    ri.apply_remote_sub("r2", G, "foo", "bar", remove=True)
    ri.update_remote_qsub("r1", G, "foo", "bar", 1)
    assert ri.match_remote(G, "foo").queues["bar"] == (("r1", 1),)


def test_drop_link_slice() -> None:
    ri: RemoteInterest[str] = RemoteInterest()
    for link in ("r1", "r2"):
        for account in ("A", "B"):
            ri.apply_remote_sub(link, account, "foo.*")
            ri.apply_remote_sub(link, account, "bar", "q", 2)
    assert ri.remove_remote_subs("r1") == 4
    assert ri.remove_remote_subs("r1") == 0
    assert len(ri) == 4
    assert ri.match_remote("A", "foo.x").links == ("r2",)
    assert ri.count("r1") == 0
    assert ri.count("r2") == 4


def test_drop_account_slice() -> None:
    ri: RemoteInterest[str] = RemoteInterest()
    for link in ("r1", "r2"):
        for account in ("A", "B"):
            ri.apply_remote_sub(link, account, "foo")
    assert ri.remove_remote_subs_for_account("r1", "A") == 1
    assert ri.remove_remote_subs_for_account("r1", "A") == 0
    assert ri.match_remote("A", "foo").links == ("r2",)
    assert sorted(ri.match_remote("B", "foo").links) == ["r1", "r2"]
    assert ri.remove_remote_subs_for_account("r1", "B") == 1
    assert ri.links() == ["r2"]


def test_dropping_a_slice_touches_only_that_slice(monkeypatch: pytest.MonkeyPatch) -> None:
    """The cost of a drop is the slice, not the table: count the trie removals it performs."""
    ri: RemoteInterest[str] = RemoteInterest()
    for i in range(2000):
        ri.apply_remote_sub("big", G, f"s.{i}")
    for i in range(50):
        ri.apply_remote_sub("small", G, f"s.{i}")
        ri.apply_remote_sub("small", "other", f"t.{i}")
    detached: list[Subscription] = []
    original = SubjectTrie._detach

    def counting(self: Any, sub: Subscription) -> bool:
        detached.append(sub)
        return original(self, sub)

    monkeypatch.setattr(SubjectTrie, "_detach", counting)
    assert ri.remove_remote_subs_for_account("small", "other") == 50
    assert len(detached) == 50
    assert ri.remove_remote_subs("small") == 50
    assert len(detached) == 100
    assert len(ri) == 2000


def test_genid_never_repeats_across_account_lifetimes() -> None:
    ri: RemoteInterest[str] = RemoteInterest()
    seen = {ri.genid}
    for _ in range(3):
        ri.apply_remote_sub("r1", G, "foo")
        seen.add(ri.genid)
        ri.remove_remote_subs("r1")
        seen.add(ri.genid)
    assert len(seen) == 7


def test_entries_and_stats() -> None:
    ri: RemoteInterest[str] = RemoteInterest()
    ri.apply_remote_sub("r1", "A", "foo")
    ri.apply_remote_sub("r1", "B", "bar", "q", 4)
    ri.apply_remote_sub("r2", "A", "baz")
    assert set(ri.entries("r1")) == {
        RemoteEntry("r1", "A", "foo", None, 1),
        RemoteEntry("r1", "B", "bar", "q", 4),
    }
    assert len(list(ri.entries())) == 3
    ri.match_remote("A", "foo")
    ri.match_remote("A", "foo")
    stats = ri.stats()
    assert stats.num_subscriptions == 3
    assert stats.num_matches == 2
    assert stats.cache_hit_rate == 0.5


def test_pattern_interest_matches_channels_exactly() -> None:
    ri: RemoteInterest[str] = RemoteInterest()
    assert ri.apply_remote_sub("r1", G, pattern_subject(b"ord*"))
    assert not ri.apply_remote_sub("r1", G, pattern_subject(b"ord*"))
    ri.apply_remote_sub("r2", G, pattern_subject(b"*[ ]*"))
    ri.apply_remote_sub("r2", G, "orders.eu")
    assert ri.match_remote(G, "orders.eu").links == ("r2", "r1")  # once each
    assert ri.match_remote(G, "order").links == ("r1",)
    assert ri.match_remote(G, channel_subject(b"ord x").decode()).links == ("r1", "r2")
    assert not ri.match_remote(G, "zzz")
    assert not ri.match_remote("other", "order")
    assert ri.has_remote_interest(G, "orders")
    assert not ri.has_remote_interest(G, "x")
    assert ri.apply_remote_sub("r1", G, pattern_subject(b"ord*"), remove=True)
    assert not ri.match_remote(G, "order")
    assert ri.remove_remote_subs("r2") == 2
    assert not ri.match_remote(G, channel_subject(b"ord x").decode())
    assert len(ri) == 0


@pytest.mark.parametrize(
    ("subject", "queue"),
    [
        ("$R.P.6F", None),
        ("$R.P.6f 72", None),
        ("$R.P.zz", None),
        ("$R.P.", None),
        ("$R.P.61", "q"),
        (pattern_subject(b"*" * 1025), None),  # (longer than any pattern a client may subscribe)
    ],
)
def test_misspelled_pattern_interest_is_refused(subject: str, queue: str | None) -> None:
    ri: RemoteInterest[str] = RemoteInterest()
    with pytest.raises(InvalidSubjectError):
        ri.apply_remote_sub("r1", G, subject, queue)
    assert len(ri) == 0
    assert list(ri.entries()) == []


LINKS = st.sampled_from(["r1", "r2", "r3"])
ACCOUNTS = st.sampled_from(["A", "B"])
PATTERNS = st.sampled_from([b"a*", b"*.b", b"?", b"a.[ab]*", b"* *", b"*", b"[]"]).map(pattern_subject)
SUBJECTS = (
    st.lists(st.sampled_from(["a", "b", "*", ">"]), min_size=1, max_size=3).map(".".join) | PATTERNS
)
CHANNELS = st.lists(st.sampled_from(["a", "b", "c", "a b", ""]), min_size=1, max_size=4).map(".".join)
PUBLISH = CHANNELS.map(lambda channel: channel_subject(channel.encode()).decode())
QUEUES = st.none() | st.sampled_from(["q1", "q2"])

Key = tuple[str, str, str, str | None]


class RemoteMachine(RuleBasedStateMachine):
    """A dict of (link, account, subject, queue) -> weight, matched by brute force, is the model."""

    def __init__(self) -> None:
        super().__init__()
        self.ri: RemoteInterest[str] = RemoteInterest()
        self.model: dict[Key, int] = {}

    @rule(link=LINKS, account=ACCOUNTS, subject=SUBJECTS, queue=QUEUES, weight=st.integers(1, 4))
    def add(self, link: str, account: str, subject: str, queue: str | None, weight: int) -> None:
        key = (link, account, subject, queue)
        try:
            changed = self.ri.apply_remote_sub(link, account, subject, queue, weight)
        except InvalidSubjectError:
            return
        weight = 1 if queue is None else weight
        assert changed == (self.model.get(key) != weight)
        self.model[key] = weight

    @rule(link=LINKS, account=ACCOUNTS, subject=SUBJECTS, queue=QUEUES)
    def remove(self, link: str, account: str, subject: str, queue: str | None) -> None:
        key = (link, account, subject, queue)
        assert self.ri.apply_remote_sub(link, account, subject, queue, remove=True) == (
            key in self.model
        )
        self.model.pop(key, None)

    @rule(link=LINKS)
    def drop_link(self, link: str) -> None:
        gone = [k for k in self.model if k[0] == link]
        assert self.ri.remove_remote_subs(link) == len(gone)
        for k in gone:
            del self.model[k]

    @rule(link=LINKS, account=ACCOUNTS)
    def drop_account(self, link: str, account: str) -> None:
        gone = [k for k in self.model if k[0] == link and k[1] == account]
        assert self.ri.remove_remote_subs_for_account(link, account) == len(gone)
        for k in gone:
            del self.model[k]

    @rule(account=ACCOUNTS, subject=PUBLISH)
    def match(self, account: str, subject: str) -> None:
        channel = subject_channel(subject.encode())
        hits = [
            (k, w) for k, w in self.model.items() if k[1] == account and _wants(k[2], subject, channel)
        ]
        links = {k[0] for k, _ in hits if k[3] is None}
        queues: dict[str, dict[str, int]] = {}
        for (link, _, _, queue), w in hits:
            if queue is not None:
                queues.setdefault(queue, {}).setdefault(link, 0)
                queues[queue][link] += w
        got = self.ri.match_remote(account, subject)
        assert len(got.links) == len(set(got.links))
        assert set(got.links) == links
        assert {q: dict(pairs) for q, pairs in got.queues.items()} == queues
        assert self.ri.has_remote_interest(account, subject) == bool(hits)

    @invariant()
    def sizes_agree(self) -> None:
        assert len(self.ri) == len(self.model)
        assert {(e.link, e.account, e.subject, e.queue): e.weight for e in self.ri.entries()} == (
            self.model
        )


def _wants(interest: str, subject: str, channel: bytes) -> bool:
    pattern = subject_pattern(interest)
    return subject_matches(interest, subject) if pattern is None else glob_match(pattern, channel)


TestRemoteAgainstModel = pytest.mark.slow(RemoteMachine.TestCase)
TestRemoteAgainstModel.settings = settings(max_examples=200, stateful_step_count=40)
