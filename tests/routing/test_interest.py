"""Interest tracking: which subscription changes become announcements, and that they add up."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from routing import InterestChange, InterestTracker, RemoteEntry, RemoteInterest

G = "$G"


def test_plain_interest_is_announced_on_first_and_withdrawn_on_last() -> None:
    # after nats-server's TestNewRouteProgressiveNormalSubs
    t = InterestTracker()
    assert t.update(G, "foo") == InterestChange(G, "foo", None, 1)
    assert t.update(G, "foo") is None
    assert t.update(G, "foo", delta=-1) is None
    assert t.update(G, "foo", delta=-1) == InterestChange(G, "foo", None, 0)
    assert len(t) == 0


def test_queue_interest_announces_every_weight() -> None:
    t = InterestTracker()
    weights = [t.update(G, "foo", "q", d) for d in (1, 1, 1, -1, -1, -1)]
    assert [c.weight for c in weights if c is not None] == [1, 2, 3, 2, 1, 0]
    last = weights[-1]
    assert last is not None
    assert last.withdrawn


def test_cluster_wide_mode_announces_queue_groups_as_present_or_absent() -> None:
    t = InterestTracker(queue_weights=False)
    assert t.update(G, "foo", "q", 3) == InterestChange(G, "foo", "q", 1)
    assert t.update(G, "foo", "q", 2) is None
    assert t.update(G, "foo", "q", -4) is None
    assert t.update(G, "foo", "q", -1) == InterestChange(G, "foo", "q", 0)


def test_going_below_zero_is_a_bug() -> None:
    t = InterestTracker()
    with pytest.raises(ValueError, match="below zero"):
        t.update(G, "foo", delta=-1)
    assert len(t) == 0


def test_zero_delta_changes_nothing() -> None:
    t = InterestTracker()
    assert t.update(G, "foo", delta=0) is None
    assert len(t) == 0


def test_connection_close_is_one_update_per_key() -> None:
    t = InterestTracker()
    for _ in range(2):
        t.update(G, "foo")
    for _ in range(3):
        t.update(G, "foo", "q")
    t.update(G, "bar", "q")
    changes = t.update_batch(G, {("foo", None): -2, ("foo", "q"): -3})
    assert changes == [InterestChange(G, "foo", None, 0), InterestChange(G, "foo", "q", 0)]
    assert t.count(G, "bar", "q") == 1


def test_snapshot_lists_current_interest() -> None:
    t = InterestTracker()
    t.update("A", "foo")
    t.update("A", "foo")
    t.update("A", "bar", "q", 4)
    t.update("B", "baz")
    assert set(t.snapshot()) == {
        InterestChange("A", "foo", None, 1),
        InterestChange("A", "bar", "q", 4),
        InterestChange("B", "baz", None, 1),
    }
    assert list(t.snapshot(["B"])) == [InterestChange("B", "baz", None, 1)]
    assert sorted(t.accounts()) == ["A", "B"]


def apply(ri: RemoteInterest[str], change: InterestChange) -> None:
    """What a peer does with an announcement it receives."""
    ri.apply_remote_sub(
        "peer",
        change.account,
        change.subject,
        change.queue,
        change.weight or 1,
        remove=change.withdrawn,
    )


KEYS = st.tuples(
    st.sampled_from(["A", "B"]),
    st.sampled_from(["foo", "bar.*", ">"]),
    st.none() | st.sampled_from(["q1", "q2"]),
)


@given(st.booleans(), st.lists(st.tuples(KEYS, st.sampled_from([1, 1, 2, -1, -1, -3]))))
def test_announcements_add_up_to_the_snapshot(
    queue_weights: bool, steps: list[tuple[tuple[str, str, str | None], int]]
) -> None:
    """A peer that heard every change holds what a peer given a fresh snapshot holds."""
    t = InterestTracker(queue_weights=queue_weights)
    incremental: RemoteInterest[str] = RemoteInterest()
    for (account, subject, queue), delta in steps:
        delta = max(delta, -t.count(account, subject, queue))
        change = t.update(account, subject, queue, delta)
        if change is not None:
            apply(incremental, change)
    fresh: RemoteInterest[str] = RemoteInterest()
    for change in t.snapshot():
        apply(fresh, change)

    def state(ri: RemoteInterest[str]) -> set[RemoteEntry[str]]:
        return set(ri.entries())

    assert state(incremental) == state(fresh)
    for entry in state(fresh):
        count = t.count(entry.account, entry.subject, entry.queue)
        assert count > 0
        expected = count if entry.queue is not None and queue_weights else 1
        assert entry.weight == expected
