"""SubList behaviour, case by case, after the scenarios of nats-server's ``sublist_test.go``.

Every case runs with and without the match cache, as nats-server runs its ``...NoCache`` twins.
"""

import pytest

from routing import InvalidSubjectError, SubList, SubListResult, SubListStats, Subscription


@pytest.fixture(params=[True, False], ids=["cache", "nocache"])
def sl(request: pytest.FixtureRequest) -> SubList:
    return SubList(cache=request.param)


def subs(*subjects: str, queue: str | None = None) -> list[Subscription]:
    return [Subscription(s, queue) for s in subjects]


def plain(result: SubListResult) -> set[Subscription]:
    return set(result.plain)


def test_init_and_count(sl: SubList) -> None:
    assert len(sl) == 0
    for sub in subs("foo", "bar", "foo.bar"):
        sl.insert(sub)
    assert len(sl) == 3


def test_simple_literal(sl: SubList) -> None:
    (foo,) = subs("foo")
    sl.insert(foo)
    assert sl.match("foo").plain == (foo,)
    (deep,) = subs("foo.bar.baz")
    sl.insert(deep)
    assert sl.match("foo.bar.baz").plain == (deep,)


def test_partial_wildcard(sl: SubList) -> None:
    lit, pwc = subs("a.b.c", "a.*.c")
    sl.insert(lit)
    sl.insert(pwc)
    assert plain(sl.match("a.b.c")) == {lit, pwc}


def test_partial_wildcard_at_end(sl: SubList) -> None:
    lit, pwc = subs("a.b.c", "a.b.*")
    sl.insert(lit)
    sl.insert(pwc)
    assert plain(sl.match("a.b.c")) == {lit, pwc}


def test_full_wildcard(sl: SubList) -> None:
    lit, fwc = subs("a.b.c", "a.>")
    sl.insert(lit)
    sl.insert(fwc)
    assert plain(sl.match("a.b.c")) == {lit, fwc}
    assert sl.match("a.>").plain == (fwc,)


def test_two_token_publish_does_not_match_one_token_sub(sl: SubList) -> None:
    sl.insert(Subscription("foo"))
    assert not sl.match("foo.bar")


def test_full_wildcard_needs_a_token(sl: SubList) -> None:
    sl.insert(Subscription("foo.>"))
    sl.insert(Subscription("foo.*.>"))
    assert not sl.match("foo")
    assert len(sl.match("foo.bar").plain) == 1
    assert len(sl.match("foo.bar.baz").plain) == 2


def test_remove_absent_keeps_count(sl: SubList) -> None:
    sl.insert(Subscription("a.b.c.d"))
    with pytest.raises(KeyError):
        sl.remove(Subscription("a.b.c"))
    with pytest.raises(KeyError):
        sl.remove(Subscription("a.b.c.d"))  # same subject, different subscription
    assert len(sl) == 1


def test_remove_wildcards_independently(sl: SubList) -> None:
    lit, pwc, fwc = subs("a.b.c.d", "a.b.*.d", "a.b.>")
    for sub in (lit, pwc, fwc):
        sl.insert(sub)
    assert len(sl.match("a.b.c.d").plain) == 3
    sl.remove(pwc)
    assert plain(sl.match("a.b.c.d")) == {lit, fwc}
    sl.remove(fwc)
    assert plain(sl.match("a.b.c.d")) == {lit}
    sl.remove(lit)
    assert len(sl) == 0
    assert not sl.match("a.b.c.d")


@pytest.mark.parametrize("subject", ["a.b.c.d.e.f", "a.b.*.d.e.>"])
def test_remove_prunes_every_level(sl: SubList, subject: str) -> None:
    sub = Subscription(subject)
    sl.insert(sub)
    assert sl.depth() == 6
    sl.remove(sub)
    assert sl.depth() == 0


def test_remove_prunes_only_what_is_empty(sl: SubList) -> None:
    shallow, deep = subs("a.b", "a.b.c.d")
    sl.insert(shallow)
    sl.insert(deep)
    sl.remove(deep)
    assert sl.depth() == 2
    assert sl.match("a.b").plain == (shallow,)


@pytest.mark.parametrize("sibling", ["a.>", "a.*", "a.*.c"])
def test_prune_stops_at_a_node_with_only_wildcard_children(sl: SubList, sibling: str) -> None:
    keep, drop = Subscription(sibling), Subscription("a.b")
    sl.insert(keep)
    sl.insert(drop)
    sl.remove(drop)
    assert set(sl) == {keep}
    subject = "a.x.c" if sibling == "a.*.c" else "a.x"
    assert sl.match(subject).plain == (keep,)


def test_remove_with_large_subs(sl: SubList) -> None:
    many = subs(*["foo"] * 512)
    for sub in many:
        sl.insert(sub)
    assert len(sl.match("foo").plain) == 512
    for sub in (many[256], many[0], many[511]):
        sl.remove(sub)
    assert len(sl.match("foo").plain) == 509
    assert len(sl) == 509


@pytest.mark.parametrize("subject", [".foo", "foo.", "foo..bar", "foo.bar..baz", "foo.>.bar", ""])
def test_insert_rejects_invalid_subjects(sl: SubList, subject: str) -> None:
    with pytest.raises(InvalidSubjectError):
        sl.insert(Subscription(subject))
    assert len(sl) == 0
    assert sl.depth() == 0


@pytest.mark.parametrize("subject", ["a.b..d", "a.>.b", "a b"])
def test_remove_rejects_invalid_subjects(sl: SubList, subject: str) -> None:
    with pytest.raises(InvalidSubjectError):
        sl.remove(Subscription(subject))


def test_invalid_subject_error_is_a_value_error() -> None:
    assert issubclass(InvalidSubjectError, ValueError)


def test_insert_same_subscription_twice_is_a_noop(sl: SubList) -> None:
    sub = Subscription("foo")
    sl.insert(sub)
    sl.insert(sub)
    assert len(sl) == 1
    assert sl.match("foo").plain == (sub,)


def test_remove_batch(sl: SubList) -> None:
    keep = Subscription("foo")
    batch = subs("foo", "bar.*", "baz.>", "q.x", queue=None)
    for sub in [keep, *batch]:
        sl.insert(sub)
    stranger = Subscription("foo")  # never inserted: skipped, not an error
    invalid = Subscription("a..b")
    assert sl.remove_batch([*batch, stranger, invalid]) == len(batch)
    assert len(sl) == 1
    assert sl.match("foo").plain == (keep,)
    assert sl.remove_batch(batch) == 0


def test_remove_batch_does_not_enable_a_disabled_cache() -> None:
    sl = SubList(cache=False)
    sub = Subscription("foo")
    sl.insert(sub)
    sl.remove_batch([sub])
    sl.match("foo")
    assert sl.stats().num_cache == 0


def test_cache_follows_inserts_and_removes() -> None:
    sl = SubList()
    a, b, c = subs("foo", "bar", "foo.bar")
    for sub in (a, b, c):
        sl.insert(sub)
    assert sl.match("foo").plain == (a,)
    assert sl.match("foo.bar").plain == (c,)
    assert sl.stats().num_cache == 2
    # A wildcard inserted after foo.bar was cached must show up in its result.
    fwc = Subscription("foo.>")
    sl.insert(fwc)
    assert plain(sl.match("foo.bar")) == {c, fwc}
    sl.remove(c)
    assert plain(sl.match("foo.bar")) == {fwc}
    for sub in (a, b, fwc):
        sl.remove(sub)
    assert not sl.match("foo.bar")
    # After everything is gone the cache holds only negative results, which are still correct.
    assert all(not sl.match(s) for s in ("foo", "bar", "foo.bar"))


def test_literal_insert_keeps_other_cached_entries() -> None:
    sl = SubList()
    a = Subscription("a")
    sl.insert(a)
    sl.match("a")
    sl.match("b")
    sl.insert(Subscription("c"))
    assert sl.stats().num_cache == 2
    hits_before = sl.stats().cache_hit_rate
    sl.match("a")
    assert sl.stats().cache_hit_rate > hits_before


def test_cache_is_bounded() -> None:
    sl = SubList()
    sl.insert(Subscription("foo.*"))
    for i in range(2048):
        sl.match(f"foo.{i}")
    assert sl.stats().num_cache <= 1024
    assert len(sl.match("foo.9999").plain) == 1


def test_negative_results_are_cached_and_counted() -> None:
    sl = SubList()
    assert not sl.match("nothing")
    assert not sl.match("nothing")
    stats = sl.stats()
    assert stats.num_matches == 2
    assert stats.cache_hit_rate == 0.5
    assert stats.num_cache == 1


def test_misses_share_one_empty_result(sl: SubList) -> None:
    assert sl.match("foo") is sl.match("bar")


def test_results_are_snapshots(sl: SubList) -> None:
    a, b = subs("foo", "foo")
    sl.insert(a)
    before = sl.match("foo")
    sl.insert(b)
    after = sl.match("foo")
    sl.remove(a)
    assert before.plain == (a,)
    assert set(after.plain) == {a, b}
    assert sl.match("foo").plain == (b,)


def test_queue_results(sl: SubList) -> None:
    # TestSublistBasicQueueResults
    sub = Subscription("foo")
    bar1, bar2 = subs("foo", "foo", queue="bar")
    baz1, baz2 = subs("foo", "foo", queue="baz")
    sl.insert(sub)
    sl.insert(bar1)
    r = sl.match("foo")
    assert r.plain == (sub,)
    assert r.queues == ((bar1,),)
    sl.insert(bar2)
    assert sl.match("foo").queues == ((bar1, bar2),)
    sl.insert(baz1)
    sl.insert(baz2)
    groups = {g[0].queue: set(g) for g in sl.match("foo").queues}
    assert groups == {"bar": {bar1, bar2}, "baz": {baz1, baz2}}
    sl.remove(bar1)
    sl.remove(bar2)
    assert sl.match("foo").queues == ((baz1, baz2),)
    sl.remove(baz1)
    sl.remove(baz2)
    sl.remove(sub)
    assert not sl.match("foo")


def test_queue_group_merges_across_patterns(sl: SubList) -> None:
    lit, wild = Subscription("foo.bar", "q"), Subscription("foo.*", "q")
    sl.insert(lit)
    sl.insert(wild)
    (group,) = sl.match("foo.bar").queues
    assert set(group) == {lit, wild}


def test_wildcard_characters_in_longer_tokens_are_literal(sl: SubList) -> None:
    # TestSublistInsertWithWildcardsAsLiterals / RemoveWithWildcardsAsLiterals
    for subject in ("foo.*-", "foo.>-"):
        sub = Subscription(subject)
        sl.insert(sub)
        assert not sl.match("foo.bar")
        assert sl.match(subject).plain == (sub,)
        with pytest.raises(KeyError):
            sl.remove(Subscription("foo.bar"))
        sl.remove(sub)


@pytest.mark.parametrize("subject", [".foo", "..foo", "foo..", "foo.", "foo..bar", "foo...bar"])
def test_empty_tokens_match_nothing(sl: SubList, subject: str) -> None:
    # TestSublistMatchWithEmptyTokens
    sl.insert(Subscription(">"))
    sl.insert(Subscription(">", "queue"))
    assert not sl.match(subject)
    assert not sl.has_interest(subject)


def test_has_interest(sl: SubList) -> None:
    # TestSublistHasInterest
    assert not sl.has_interest("foo")
    cases = [
        ("foo", ["foo"], ["bar", "foo.bar"]),
        ("foo.*", ["foo.bar"], ["foo", "foo.bar.baz"]),
        ("foo.>", ["foo.bar", "foo.bar.baz"], ["foo"]),
        ("*.>", ["foo.bar"], ["foo"]),
        ("*.bar", ["foo.bar"], ["foo.baz"]),
        ("*", ["foo"], ["foo.bar"]),
    ]
    for pattern, hits, misses in cases:
        sub = Subscription(pattern)
        sl.insert(sub)
        assert all(sl.has_interest(s) for s in hits), pattern
        assert not any(sl.has_interest(s) for s in misses), pattern
        sl.remove(sub)
    qsub = Subscription("foo", "q")
    sl.insert(qsub)
    assert sl.has_interest("foo")
    sl.remove(qsub)
    assert not sl.has_interest("foo")


def test_has_interest_overlapping(sl: SubList) -> None:
    # TestSublistHasInterestOverlapping: the `*` branch failing must not end the search.
    sl.insert(Subscription("stream.A.child"))
    sl.insert(Subscription("stream.*"))
    assert sl.has_interest("stream.A")
    assert sl.has_interest("stream.A.child")


def test_has_interest_does_not_fill_the_cache() -> None:
    sl = SubList()
    sl.insert(Subscription("foo"))
    assert sl.has_interest("foo")
    stats = sl.stats()
    assert stats.num_cache == 0
    assert stats.cache_hit_rate == 0.0
    sl.match("foo")
    assert sl.has_interest("foo")
    assert sl.stats().cache_hit_rate > 0


def test_stats() -> None:
    sl = SubList()
    a, b, c = subs("foo", "foo.*", "foo.bar")
    q = Subscription("foo.bar", "q")
    for sub in (a, b, c, q):
        sl.insert(sub)
    sl.remove(a)
    for subject in ("foo.bar", "foo.bar", "foo.bar", "foo.baz"):
        sl.match(subject)
    stats = sl.stats()
    assert stats.num_subscriptions == 3
    assert stats.num_inserts == 4
    assert stats.num_removes == 1
    assert stats.num_matches == 4
    assert stats.cache_hit_rate == 0.5
    assert stats.num_cache == 2
    assert stats.max_fanout == 3  # foo.*, foo.bar and the group q
    assert stats.avg_fanout == 2.0  # (3 + 1) / 2


def test_no_cache_stats() -> None:
    sl = SubList(cache=False)
    sl.insert(Subscription("foo"))
    sl.match("foo")
    stats = sl.stats()
    assert stats.num_cache == 0
    assert stats.cache_hit_rate == 0.0


def test_genid_grows_with_every_change(sl: SubList) -> None:
    seen = [sl.genid]
    sub = Subscription("foo.*")
    sl.insert(sub)
    seen.append(sl.genid)
    sl.remove(sub)
    seen.append(sl.genid)
    sl.insert(sub)
    sl.remove_batch([sub])
    seen.append(sl.genid)
    assert seen == sorted(set(seen))


def test_iteration_lists_every_subscription(sl: SubList) -> None:
    all_subs = [*subs("a", "a.b", "a.*", ">"), Subscription("a", "q")]
    for sub in all_subs:
        sl.insert(sub)
    assert set(sl) == set(all_subs)


def test_combined_stats_reweight_rates() -> None:
    # TestSublistAddCacheHitRate: 4 matches, the first a miss, is 0.75; two such lists still 0.75.
    lists = [SubList(), SubList()]
    for sl in lists:
        sl.insert(Subscription("foo"))
        for _ in range(4):
            sl.match("foo")
    assert lists[0].stats().cache_hit_rate == 0.75
    total = SubListStats.combine(sl.stats() for sl in lists)
    assert total.cache_hit_rate == 0.75
    assert total.num_matches == 8
    assert total.num_subscriptions == 2
    idle = SubList()
    assert SubListStats.combine([lists[0].stats(), idle.stats()]).cache_hit_rate == 0.75
