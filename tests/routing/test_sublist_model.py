"""Hypothesis drives random insert/remove/match sequences against a brute-force model.

The model is a plain list of live subscriptions matched one by one with ``subject_matches``: too
slow to ship, too simple to be wrong. A cached and an uncached SubList follow the same steps, so
a stale cache entry shows up as a disagreement with both the model and the uncached twin.
"""

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    invariant,
    multiple,
    precondition,
    rule,
)

from routing import SubList, SubListResult, Subscription, is_valid_subject, subject_matches

TOKEN = st.sampled_from(["a", "b", "c", "*", ">", "*x"])
SUBJECT = st.lists(TOKEN, min_size=1, max_size=4).map(".".join)
PUBLISH = st.lists(st.sampled_from(["a", "b", "c", "d", "*x", "*", ""]), min_size=1, max_size=5).map(
    ".".join
)
QUEUE = st.none() | st.sampled_from(["q1", "q2"])


def as_sets(result: SubListResult) -> tuple[set[Subscription], dict[str | None, set[Subscription]]]:
    return set(result.plain), {group[0].queue: set(group) for group in result.queues}


def model_match(
    live: list[Subscription], subject: str
) -> tuple[set[Subscription], dict[str | None, set[Subscription]]]:
    matched = [sub for sub in live if subject_matches(sub.subject, subject)]
    queues: dict[str | None, set[Subscription]] = {}
    for sub in matched:
        if sub.queue is not None:
            queues.setdefault(sub.queue, set()).add(sub)
    return {sub for sub in matched if sub.queue is None}, queues


class SubListMachine(RuleBasedStateMachine):
    subs = Bundle("subs")

    def __init__(self) -> None:
        super().__init__()
        self.cached = SubList()
        self.uncached = SubList(cache=False)
        self.live: list[Subscription] = []
        self.handed_out: list[tuple[SubListResult, object]] = []

    @rule(target=subs, subject=SUBJECT, queue=QUEUE)
    def insert(self, subject: str, queue: str | None) -> Subscription:
        sub = Subscription(subject, queue)
        if is_valid_subject(subject):
            self.cached.insert(sub)
            self.uncached.insert(sub)
            self.live.append(sub)
        return sub

    @rule(target=subs, subject=st.sampled_from(["a", "a.*", ">"]), queue=QUEUE, n=st.integers(2, 20))
    def insert_crowd(self, subject: str, queue: str | None, n: int) -> object:
        """Many subscribers on one pattern, past the size where a node switches containers."""
        crowd = [Subscription(subject, queue) for _ in range(n)]
        for sub in crowd:
            self.cached.insert(sub)
            self.uncached.insert(sub)
        self.live.extend(crowd)
        return multiple(*crowd)

    @rule(sub=consumes(subs))
    def remove(self, sub: Subscription) -> None:
        if sub in self.live:
            self.cached.remove(sub)
            self.uncached.remove(sub)
            self.live.remove(sub)

    @precondition(lambda self: len(self.live) > 1)
    @rule(data=st.data())
    def remove_batch(self, data: st.DataObject) -> None:
        batch = data.draw(st.lists(st.sampled_from(self.live), unique=True, max_size=4))
        assert self.cached.remove_batch(batch) == len(batch)
        assert self.uncached.remove_batch(batch) == len(batch)
        for sub in batch:
            self.live.remove(sub)

    @rule(subject=PUBLISH)
    def match(self, subject: str) -> None:
        expected = model_match(self.live, subject)
        for sl in (self.cached, self.uncached):
            result = sl.match(subject)
            assert as_sets(result) == expected
            assert sl.has_interest(subject) == bool(expected[0] or expected[1])
            self.handed_out.append((result, expected))

    @invariant()
    def results_handed_out_never_change(self) -> None:
        for result, seen in self.handed_out:
            assert as_sets(result) == seen

    @invariant()
    def holds_exactly_the_live_subscriptions(self) -> None:
        assert len(self.cached) == len(self.uncached) == len(self.live)
        assert set(self.cached) == set(self.uncached) == set(self.live)

    def teardown(self) -> None:
        self.cached.remove_batch(list(self.live))
        assert self.cached.depth() == 0


TestSubListAgainstModel = pytest.mark.slow(SubListMachine.TestCase)
TestSubListAgainstModel.settings = settings(max_examples=300, stateful_step_count=40)
